"""The GPT model: configuration, attention and the transformer."""

from model.config import ModelConfig
from model.gpt import GPT

__all__ = ["GPT", "ModelConfig"]
