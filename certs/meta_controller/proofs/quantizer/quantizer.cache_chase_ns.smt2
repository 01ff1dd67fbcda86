; mi-certify proof obligation on the raw-input quantizer. Expected answer: unsat.
; Not self-contained: prepend proofs/quantizer/design.smt2 (the quantizer from Yosys write_smt2 and the constants
; q_* bound to its ports). The run table is the Python runtime's word_level on every word.
(assert (let ((a!0 (and (= q_valid_cache_chase_ns #b0)
                (not (= ((_ extract 1 1) q_input_fault) #b1))))
      (a!1 (ite (bvule q_raw_compute_util #x6fff)
                false
                (ite (bvule q_raw_compute_util #x77ff)
                     false
                     (ite (bvule q_raw_compute_util #x8000) false true))))
      (a!2 (ite (bvule q_raw_mem_bw_avail_gbs #x2fff)
                false
                (ite (bvule q_raw_mem_bw_avail_gbs #x37ff)
                     false
                     (ite (bvule q_raw_mem_bw_avail_gbs #x4000) false true))))
      (a!3 (or (= q_valid_free_sram_kb #b0)
                (ite (bvule q_raw_free_sram_kb #x1ff)
                     false
                     (ite (bvule q_raw_free_sram_kb #x400) false true))))
      (a!4 (ite (bvsge #x2bb q_raw_temperature_c)
                 false
                 (ite (bvsge #x315 q_raw_temperature_c)
                      false
                      (ite (bvsge #x370 q_raw_temperature_c) false true))))
      (a!5 (ite (bvule q_raw_cache_chase_ns #x2fff)
                 false
                 (ite (bvule q_raw_cache_chase_ns #x37ff)
                      false
                      (ite (bvule q_raw_cache_chase_ns #x4000) false true))))
      (a!6 (ite (bvule q_raw_cache_chase_ns #x2fff)
                 #b101
                 (ite (bvule q_raw_cache_chase_ns #x37ff)
                      #b110
                      (ite (bvule q_raw_cache_chase_ns #x4000) #b111 #b000)))))
(let ((a!7 (ite (bvule q_raw_compute_util #x57ff)
                false
                (ite (bvule q_raw_compute_util #x5fff)
                     false
                     (ite (bvule q_raw_compute_util #x67ff) false a!1))))
      (a!8 (ite (bvule q_raw_mem_bw_avail_gbs #x17ff)
                false
                (ite (bvule q_raw_mem_bw_avail_gbs #x1fff)
                     false
                     (ite (bvule q_raw_mem_bw_avail_gbs #x27ff) false a!2))))
      (a!9 (ite (bvsge #x1ad q_raw_temperature_c)
                 false
                 (ite (bvsge #x207 q_raw_temperature_c)
                      false
                      (ite (bvsge #x261 q_raw_temperature_c) false a!4))))
      (a!10 (ite (bvule q_raw_cache_chase_ns #x17ff)
                 false
                 (ite (bvule q_raw_cache_chase_ns #x1fff)
                      false
                      (ite (bvule q_raw_cache_chase_ns #x27ff) false a!5))))
      (a!11 (ite (bvule q_raw_cache_chase_ns #x17ff)
                 #b010
                 (ite (bvule q_raw_cache_chase_ns #x1fff)
                      #b011
                      (ite (bvule q_raw_cache_chase_ns #x27ff) #b100 a!6)))))
(let ((a!12 (ite (bvule q_raw_compute_util #x3fff)
                false
                (ite (bvule q_raw_compute_util #x47ff)
                     false
                     (ite (bvule q_raw_compute_util #x4fff) false a!7))))
      (a!13 (or (= q_valid_mem_bw_avail_gbs #b0)
                (ite (bvule q_raw_mem_bw_avail_gbs #x07ff)
                     false
                     (ite (bvule q_raw_mem_bw_avail_gbs #x0fff) false a!8))))
      (a!14 (ite (bvsge #x09f q_raw_temperature_c)
                 true
                 (ite (bvsge #x0f9 q_raw_temperature_c)
                      false
                      (ite (bvsge #x153 q_raw_temperature_c) false a!9))))
      (a!15 (ite (bvule q_raw_cache_chase_ns #x07ff)
                 false
                 (ite (bvule q_raw_cache_chase_ns #x0fff) false a!10)))
      (a!16 (ite (bvule q_raw_cache_chase_ns #x07ff)
                 #b000
                 (ite (bvule q_raw_cache_chase_ns #x0fff) #b001 a!11))))
(let ((a!17 (ite (bvule q_raw_compute_util #x27ff)
                false
                (ite (bvule q_raw_compute_util #x2fff)
                     false
                     (ite (bvule q_raw_compute_util #x37ff) false a!12))))
      (a!18 (and (= (= ((_ extract 1 1) q_input_fault) #b1) a!15)
                 (or a!15 (= ((_ extract 9 7) q_addr) a!16))
                 (or a!15 (= ((_ extract 9 7) q_levels) a!16)))))
(let ((a!19 (ite (bvule q_raw_compute_util #x0fff)
                false
                (ite (bvule q_raw_compute_util #x17ff)
                     false
                     (ite (bvule q_raw_compute_util #x1fff) false a!17)))))
(let ((a!20 (not (or (= q_valid_compute_util #b0)
                    (ite (bvule q_raw_compute_util #x07ff) false a!19)))))
(let ((a!21 (and (= q_valid_cache_chase_ns #b1)
                 a!20
                 (not a!13)
                 (not a!3)
                 (not (or (= q_valid_temperature_c #b0) a!14))
                 (not a!18))))
  (or a!0 a!21)))))))))
(check-sat)
