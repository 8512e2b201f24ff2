"""What a device that may not exist yet could run, and how fast: TTIR analysis + device model."""
from .analysis import LaunchCounts, analyse
from .model import Prediction, predict, predict_launch
from .run import simulate_suite

__all__ = ["LaunchCounts", "Prediction", "analyse", "predict", "predict_launch", "simulate_suite"]
