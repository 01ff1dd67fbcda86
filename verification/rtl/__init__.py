"""Proofs layer (formal): FSM proofs by k-induction, RTL proofs (Yosys + Z3), LUT property check, synthesis figures."""
