"""mi_certify.runtime: the reference LUT-FSM and exact quantization."""

from .fsm import FsmConfig, FsmState, LutFsm, Reason, StepResult, reset_state, transition
from .quantize import Quantizer, address, quantize, split_address

__all__ = ["FsmConfig", "FsmState", "LutFsm", "Quantizer", "Reason", "StepResult", "address", "quantize",
           "reset_state", "split_address", "transition"]
