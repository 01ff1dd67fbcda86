; mi-certify proof obligation on the RTL. Expected answer: unsat.
; Not self-contained: prepend proofs/rtl/design.smt2 (the design from Yosys write_smt2, with the
; LUT read as a cut point, and the constants cur_*/nxt_* bound to its signals).
(assert (let ((a!0 (not (and (= (ubv_to_int nxt_token) 0)
                     (= (ubv_to_int nxt_cand) 0)
                     (= (ubv_to_int nxt_hcnt) 0)
                     (= (ubv_to_int nxt_dcnt) 0)
                     (= (ubv_to_int nxt_vcnt) 0)
                     (not (= nxt_fb #b1))
                     (= (ubv_to_int nxt_rcnt) 0)
                     (= (ubv_to_int nxt_op_mode) 0)
                     (= (ubv_to_int nxt_op_act) 0)
                     (= (ubv_to_int nxt_op_left) 0)
                     (= nxt_reason #x0)
                     (= nxt_valid_q1 #b0)
                     (= nxt_valid_q2 #b0)
                     (= nxt_valid_q3 #b0)))))
  (and (= cur_rst #b1) a!0)))
(check-sat)
