"""The HelperProgram stage: a model with its fitted functions bound in, evaluated over every
candidate configuration at once, with the choice rule, and its export as C and Python."""

from klaraptor.helper.program import HelperProgram

__all__ = ["HelperProgram"]
