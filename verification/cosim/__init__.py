"""Proofs layer (simulation): cocotb and vector co-simulation, SLA-monitor co-simulation, coverage."""
