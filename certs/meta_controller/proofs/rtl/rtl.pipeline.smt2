; mi-certify proof obligation on the RTL. Expected answer: unsat.
; Not self-contained: prepend proofs/rtl/design.smt2 (the design from Yosys write_smt2, with the
; LUT read as a cut point, and the constants cur_*/nxt_* bound to its signals).
(assert (and (not (= cur_rst #b1))
     (not (and (= nxt_addr_q1 cur_addr)
               (= nxt_probe_fault_q1 cur_probe_fault)
               (= nxt_sla_violation_q1 cur_sla_violation)
               (= nxt_op_cmd_q1 cur_op_cmd)
               (= nxt_op_arg_q1 cur_op_arg)
               (= nxt_valid_q1 cur_step)
               (= nxt_addr_q2 cur_addr_q1)
               (= nxt_probe_fault_q2 cur_probe_fault_q1)
               (= nxt_sla_violation_q2 cur_sla_violation_q1)
               (= nxt_op_cmd_q2 cur_op_cmd_q1)
               (= nxt_op_arg_q2 cur_op_arg_q1)
               (= nxt_valid_q2 cur_valid_q1)))))
(check-sat)
