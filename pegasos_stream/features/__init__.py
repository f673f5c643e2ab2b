"""Feature extraction: raw messages to sparse feature dicts."""

from .email import EmailFeatures, message_text
from .hashing import DictHasher, feature_hash

__all__ = ["DictHasher", "EmailFeatures", "feature_hash", "message_text"]
