; mi-certify proof obligation on the raw-input quantizer. Expected answer: unsat.
; Not self-contained: prepend proofs/quantizer/design.smt2 (the quantizer from Yosys write_smt2 and the constants
; q_* bound to its ports). The run table is the Python runtime's word_level on every word.
(assert (let ((a!0 (ite (bvsge #x2bb q_raw_temperature_c)
                false
                (ite (bvsge #x315 q_raw_temperature_c)
                     false
                     (ite (bvsge #x370 q_raw_temperature_c) false true))))
      (a!1 (or (= q_valid_free_sram_kb #b0)
               (ite (bvule q_raw_free_sram_kb #x1ff)
                    false
                    (ite (bvule q_raw_free_sram_kb #x400) false true))))
      (a!2 (ite (bvule q_raw_mem_bw_avail_gbs #x2fff)
                false
                (ite (bvule q_raw_mem_bw_avail_gbs #x37ff)
                     false
                     (ite (bvule q_raw_mem_bw_avail_gbs #x4000) false true))))
      (a!3 (ite (bvule q_raw_cache_chase_ns #x2fff)
                false
                (ite (bvule q_raw_cache_chase_ns #x37ff)
                     false
                     (ite (bvule q_raw_cache_chase_ns #x4000) false true))))
      (a!4 (ite (bvule q_raw_compute_util #x6fff)
                 false
                 (ite (bvule q_raw_compute_util #x77ff)
                      false
                      (ite (bvule q_raw_compute_util #x8000) false true))))
      (a!5 (ite (bvule q_raw_compute_util #x6fff)
                 #xd
                 (ite (bvule q_raw_compute_util #x77ff)
                      #xe
                      (ite (bvule q_raw_compute_util #x8000) #xf #x0))))
      (a!6 (ite (bvule q_raw_cache_chase_ns #x2fff)
                 #b101
                 (ite (bvule q_raw_cache_chase_ns #x37ff)
                      #b110
                      (ite (bvule q_raw_cache_chase_ns #x4000) #b111 #b000))))
      (a!7 (ite (bvule q_raw_mem_bw_avail_gbs #x2fff)
                 #b101
                 (ite (bvule q_raw_mem_bw_avail_gbs #x37ff)
                      #b110
                      (ite (bvule q_raw_mem_bw_avail_gbs #x4000) #b111 #b000))))
      (a!8 (ite (bvsge #x2bb q_raw_temperature_c)
                 #b101
                 (ite (bvsge #x315 q_raw_temperature_c)
                      #b110
                      (ite (bvsge #x370 q_raw_temperature_c) #b111 #b000)))))
(let ((a!9 (ite (bvsge #x1ad q_raw_temperature_c)
                false
                (ite (bvsge #x207 q_raw_temperature_c)
                     false
                     (ite (bvsge #x261 q_raw_temperature_c) false a!0))))
      (a!10 (ite (bvule q_raw_mem_bw_avail_gbs #x17ff)
                false
                (ite (bvule q_raw_mem_bw_avail_gbs #x1fff)
                     false
                     (ite (bvule q_raw_mem_bw_avail_gbs #x27ff) false a!2))))
      (a!11 (ite (bvule q_raw_cache_chase_ns #x17ff)
                 false
                 (ite (bvule q_raw_cache_chase_ns #x1fff)
                      false
                      (ite (bvule q_raw_cache_chase_ns #x27ff) false a!3))))
      (a!12 (ite (bvule q_raw_compute_util #x57ff)
                 false
                 (ite (bvule q_raw_compute_util #x5fff)
                      false
                      (ite (bvule q_raw_compute_util #x67ff) false a!4))))
      (a!13 (ite (bvule q_raw_compute_util #x57ff)
                 #xa
                 (ite (bvule q_raw_compute_util #x5fff)
                      #xb
                      (ite (bvule q_raw_compute_util #x67ff) #xc a!5))))
      (a!14 (ite (bvule q_raw_cache_chase_ns #x17ff)
                 #b010
                 (ite (bvule q_raw_cache_chase_ns #x1fff)
                      #b011
                      (ite (bvule q_raw_cache_chase_ns #x27ff) #b100 a!6))))
      (a!15 (ite (bvule q_raw_mem_bw_avail_gbs #x17ff)
                 #b010
                 (ite (bvule q_raw_mem_bw_avail_gbs #x1fff)
                      #b011
                      (ite (bvule q_raw_mem_bw_avail_gbs #x27ff) #b100 a!7))))
      (a!16 (ite (bvsge #x1ad q_raw_temperature_c)
                 #b010
                 (ite (bvsge #x207 q_raw_temperature_c)
                      #b011
                      (ite (bvsge #x261 q_raw_temperature_c) #b100 a!8)))))
(let ((a!17 (ite (bvsge #x09f q_raw_temperature_c)
                true
                (ite (bvsge #x0f9 q_raw_temperature_c)
                     false
                     (ite (bvsge #x153 q_raw_temperature_c) false a!9))))
      (a!18 (or (= q_valid_mem_bw_avail_gbs #b0)
               (ite (bvule q_raw_mem_bw_avail_gbs #x07ff)
                    false
                    (ite (bvule q_raw_mem_bw_avail_gbs #x0fff) false a!10))))
      (a!19 (or (= q_valid_cache_chase_ns #b0)
                (ite (bvule q_raw_cache_chase_ns #x07ff)
                     false
                     (ite (bvule q_raw_cache_chase_ns #x0fff) false a!11))))
      (a!20 (ite (bvule q_raw_compute_util #x3fff)
                 false
                 (ite (bvule q_raw_compute_util #x47ff)
                      false
                      (ite (bvule q_raw_compute_util #x4fff) false a!12))))
      (a!21 (ite (bvule q_raw_compute_util #x3fff)
                 #x7
                 (ite (bvule q_raw_compute_util #x47ff)
                      #x8
                      (ite (bvule q_raw_compute_util #x4fff) #x9 a!13))))
      (a!22 (ite (bvsge #x09f q_raw_temperature_c)
                 #b000
                 (ite (bvsge #x0f9 q_raw_temperature_c)
                      #b000
                      (ite (bvsge #x153 q_raw_temperature_c) #b001 a!16)))))
(let ((a!23 (concat (ite (or (= q_valid_temperature_c #b0) a!17) #b1 #b0)
                   (ite a!1 #b1 #b0)))
      (a!24 (ite (bvule q_raw_compute_util #x27ff)
                 false
                 (ite (bvule q_raw_compute_util #x2fff)
                      false
                      (ite (bvule q_raw_compute_util #x37ff) false a!20))))
      (a!25 (ite (bvule q_raw_compute_util #x27ff)
                 #x4
                 (ite (bvule q_raw_compute_util #x2fff)
                      #x5
                      (ite (bvule q_raw_compute_util #x37ff) #x6 a!21)))))
(let ((a!26 (ite (bvule q_raw_compute_util #x0fff)
                 false
                 (ite (bvule q_raw_compute_util #x17ff)
                      false
                      (ite (bvule q_raw_compute_util #x1fff) false a!24))))
      (a!27 (ite (bvule q_raw_compute_util #x0fff)
                 #x1
                 (ite (bvule q_raw_compute_util #x17ff)
                      #x2
                      (ite (bvule q_raw_compute_util #x1fff) #x3 a!25)))))
(let ((a!28 (or (= q_valid_compute_util #b0)
                (ite (bvule q_raw_compute_util #x07ff) false a!26)))
      (a!29 (concat (ite (bvule q_raw_compute_util #x07ff) #x0 a!27)
                    (ite (bvule q_raw_cache_chase_ns #x07ff)
                         #b000
                         (ite (bvule q_raw_cache_chase_ns #x0fff) #b001 a!14)))))
(let ((a!30 (concat (concat (concat a!23 (ite a!18 #b1 #b0)) (ite a!19 #b1 #b0))
                    (ite a!28 #b1 #b0)))
      (a!31 (or a!28 a!19 a!18 a!1 (or (= q_valid_temperature_c #b0) a!17)))
      (a!32 (concat a!29
                    (ite (bvule q_raw_mem_bw_avail_gbs #x07ff)
                         #b000
                         (ite (bvule q_raw_mem_bw_avail_gbs #x0fff) #b001 a!15)))))
(let ((a!33 (concat a!32
                    (ite (bvule q_raw_free_sram_kb #x1ff)
                         #b0
                         (ite (bvule q_raw_free_sram_kb #x400) #b1 #b0)))))
(let ((a!34 (or a!31
                (= q_levels (ite a!31 #b00000000000000 (concat a!33 a!22))))))
(let ((a!35 (and (= q_input_fault a!30)
                 (= (= q_probe_fault #b1) a!31)
                 (= q_addr (ite a!31 #b00000000000000 (concat a!33 a!22)))
                 a!34)))
  (not a!35))))))))))))
(check-sat)
