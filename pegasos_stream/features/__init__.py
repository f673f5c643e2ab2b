"""Feature extraction: raw messages to sparse feature dicts."""

from .email import EmailFeatures, message_text

__all__ = ["EmailFeatures", "message_text"]
