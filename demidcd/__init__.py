"""demidcd: fast multi-core structural SVM training (DEMI-DCD and friends)."""

__version__ = "0.1.0"
