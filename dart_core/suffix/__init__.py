"""Suffix decoding's memory: the native suffix trees (``native/src/suffix_tree.hpp``) behind the reference's cache
of one tree per active request and one global tree of earlier responses (``cache.py``)."""

from dart_core.suffix.cache import SuffixCache, SuffixDraft, SuffixTree, speculate_tree

__all__ = ["SuffixCache", "SuffixDraft", "SuffixTree", "speculate_tree"]
