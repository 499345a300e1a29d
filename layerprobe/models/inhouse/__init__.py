"""The in-house LLaMA-style family with every normalization placement, registered with the Auto classes."""

from layerprobe.models.inhouse.configuration import PLACEMENTS, SIZES, ProbeLlamaConfig, make_config
from layerprobe.models.inhouse.modeling import ProbeLlamaForCausalLM, ProbeLlamaModel, build, register, shares_init

register()

__all__ = ["PLACEMENTS", "SIZES", "ProbeLlamaConfig", "ProbeLlamaForCausalLM", "ProbeLlamaModel", "build", "make_config",
           "shares_init"]
