"""The four papers this project reproduces (:data:`PAPERS`, in the order the project presents them): titles,
authors, venues and links, in one place for the README, the book and the claims audit page. Each key names the
notebooks' folder (``notebooks/<key>/``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Paper:
    """One paper: ``key`` (the notebooks' folder), bibliographic facts, ``url`` (a public page of the paper) and
    ``question``: what it asks, in one sentence, for readers who have not read it."""

    key: str
    title: str
    authors: str
    venue: str
    year: int
    url: str
    question: str

    def citation(self) -> str:
        """``Authors (year). Title. Venue.`` in one line."""
        return f"{self.authors} ({self.year}). *{self.title}*. {self.venue}."


PAPERS: tuple[Paper, ...] = (
    Paper("tracing", "Tracing Representation Progression: Analyzing and Enhancing Layer-Wise Similarity",
          "Jiachen Jiang, Jinxin Zhou, Zhihui Zhu", "ICLR", 2025, "https://arxiv.org/abs/2406.14479",
          "Does a per-sample cosine between layers track CKA in transformers, when does a layer's top prediction "
          "stop changing (saturation), and can one classifier shared by every layer (aligned training) make "
          "shallow layers useful?"),
    Paper("alignment", "Representation Alignment in Neural Networks", "Ehsan Imani, Wei Hu, Martha White",
          "Transactions on Machine Learning Research (TMLR)", 2022, "https://openreview.net/forum?id=fLIWMnZ9ij",
          "Do trained representations align their top singular vectors with the labels, why does that speed up "
          "learning, and does it predict positive and negative transfer?"),
    Paper("redundancy", "Detecting and Approximating Redundant Computational Blocks in Neural Networks",
          "Irene Cannistraci, Emanuele Rodolà, Bastian Rieck", "arXiv:2410.04941", 2024,
          "https://arxiv.org/abs/2410.04941",
          "Which blocks of a network barely change its representation (Block Redundancy), and can a closed-form "
          "linear map replace them (Redundant Blocks Approximation)?"),
    Paper("clusters", "Fine-Tuned Transformers Show Clusters of Similar Representations Across Layers",
          "Jason Phang, Haokun Liu, Samuel R. Bowman", "BlackboxNLP workshop at EMNLP", 2021,
          "https://aclanthology.org/2021.blackboxnlp-1.42",
          "Does fine-tuning split an encoder's layers into an early and a late block of similar representations "
          "(CKA), and can the late layers be truncated or skipped?"),
)


def paper(key: str) -> Paper:
    """The paper whose notebooks live in ``notebooks/<key>/``; a ``ValueError`` names the known keys."""
    for p in PAPERS:
        if p.key == key:
            return p
    raise ValueError(f"no paper {key!r}; the papers are {[p.key for p in PAPERS]}")
