; mi-certify proof obligation on the RTL. Expected answer: unsat.
; Not self-contained: prepend proofs/rtl/design.smt2 (the design from Yosys write_smt2, with the
; LUT read as a cut point, and the constants cur_*/nxt_* bound to its signals).
(assert (or (distinct cur_audit_token cur_token)
    (distinct cur_audit_reason cur_reason)
    (and (= cur_rst #b1) (distinct nxt_audit_valid #b0))
    (and (not (= cur_rst #b1))
         (not (= cur_valid_q3 #b1))
         (distinct nxt_audit_valid #b0))
    (and (not (= cur_rst #b1))
         (= cur_valid_q3 #b1)
         (or (distinct nxt_audit_valid #b1)
             (distinct nxt_audit_addr cur_addr_q3)))))
(check-sat)
