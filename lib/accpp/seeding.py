"""Seeds of a whole-prompt circuit: which components of the final residual the recursion starts from.

Method: docs/accpp_method.md, step 8. The final residual at the answer position is split into its
components r_c (:meth:`accpp.decompose.Decomposition.components`); two rules pick the seeds
(``TraceConfig.seeding``):

``"linear"`` (default; the paper's rule, and the authors' tracer before its v0.3.0)
    Each component is projected on the logit-difference direction W_U[correct] - W_U[wrong], read
    through the final norm (gain folded, divided by the norm's per-token scale); the projections sum
    to the logit difference (less the unembedding bias). Sorted descending, the seeds are the
    components at or above the value where the cumulative sum first exceeds the total, that cutoff
    capped at total/2. Nothing is traced when the total is <= 0. Seed edge weight: the projection.

``"prob"`` (the authors' tracer's default since its v0.3.0)
    The objective is the answer's full-vocabulary log-probability, J(z) = sum_{t in T} q_t log
    softmax(z)_t over the answer's support T (one token, or a :class:`TokenSet`), with q the clean
    probabilities renormalised within T (q = 1 for one token). No counterfactual token: a
    contrastive log-probability would be the linear rule again. Each component's logit-lens vector
    u_c W_U^T (u_c = r_c read through the final norm) is attributed by Integrated Gradients along
    z(alpha) = b + alpha z_clean from the bias-only logits b (final-norm bias and unembedding bias)
    to the clean logits, 64 trapezoid intervals; the attributions sum to the completeness
    C = J(z_clean + b) - J(b). Components are then removed from the logits in decreasing attribution,
    J recomputed exactly, until the drop reaches ``prob_tau`` (0.8) of C, stopping early at the
    first non-positive attribution. Nothing is traced when C <= 0. Seed edge weight: the IG
    attribution. Logits here are before any final soft-capping (Gemma-2), as in the authors' code.

What changes against "linear": the seeds explain the answer's probability rather than its lead over
one rival, so components that raise the answer and a competitor alike can be seeds; the number of
seeds is set by the 0.8 coverage rather than the cumulative-sum rule; the counterfactual is not used.

The answer and the counterfactual are single token ids. A set of tokens (the mean logit of several,
as Greater-Than compares years) is traced only when asked for explicitly with :class:`TokenSet`; a
list of several ids (e.g. the pieces of a name that is several tokens) is refused.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["SEEDINGS", "TokenSet", "answer_ids", "is_token_set", "seeds", "answer_direction", "ProbSeeds",
           "prob_seeds", "logit_lens"]

SEEDINGS = ("linear", "prob")
_VOCAB_CHUNK = 16384  # rows of W_U converted to float64 at a time (Gemma-3: 262k x 640)


class TokenSet(tuple):
    """Several token ids traced as one answer: the mean logit of the set (``"linear"``), or the
    support of the log-probability objective (``"prob"``). Refuses an empty set and repeated ids."""

    def __new__(cls, ids):
        if isinstance(ids, (str, bytes)):
            raise TypeError(f"TokenSet needs token ids, got the string {ids!r}: tokenize it first")
        try:
            vals = tuple(_one_int(i, "a TokenSet member") for i in ids)
        except TypeError as err:
            raise TypeError(f"TokenSet needs an iterable of token ids: {err}") from err
        if not vals:
            raise ValueError("TokenSet: an empty set of token ids")
        dup = sorted({v for v in vals if vals.count(v) > 1})
        if dup:
            raise ValueError(f"TokenSet: token id(s) {dup} given more than once")
        return super().__new__(cls, vals)

    def __repr__(self) -> str:
        return f"TokenSet({list(self)})"


def _one_int(x, what: str) -> int:
    if isinstance(x, bool) or (torch.is_tensor(x) and x.dtype == torch.bool):
        raise TypeError(f"{what} must be a token id (an int), got the bool {x!r}")
    if torch.is_tensor(x):
        if x.numel() != 1 or x.is_floating_point() or x.is_complex():
            raise TypeError(f"{what} must be one integer token id, got a tensor of shape {tuple(x.shape)}, "
                            f"dtype {x.dtype}")
        return int(x.item())
    if isinstance(x, int):
        return int(x)
    if hasattr(x, "__index__") and not isinstance(x, float):
        return int(x.__index__())  # numpy integers
    raise TypeError(f"{what} must be a token id (an int), got {type(x).__name__} {x!r}")


def is_token_set(x) -> bool:
    return isinstance(x, TokenSet)


def _pieces(tokenizer, ids) -> str:
    if tokenizer is None:
        return ""
    try:
        return " (" + ", ".join(repr(tokenizer.decode([i])) for i in ids) + ")"
    except Exception:  # noqa: BLE001  decoding is only for the message
        return ""


def answer_ids(tokens, what: str, vocab: int, tokenizer=None) -> list[int]:
    """The token ids of one side of the metric, checked: a single id, or a :class:`TokenSet`.

    ``what`` names the argument in messages ("correct", "wrong"); ``vocab`` is the number of rows of
    the unembedding. A sequence or tensor of ONE id is taken as that id; of several ids it is refused
    (a word of several tokens is not an answer token) unless it is a :class:`TokenSet`. Ids outside
    0..vocab-1 are refused by name.
    """
    if isinstance(tokens, TokenSet):
        ids = list(tokens)
    elif isinstance(tokens, (str, bytes)):
        raise TypeError(f"{what} is the string {tokens!r}: pass its token id (one token, e.g. "
                        f"tokenizer({tokens!r}, add_special_tokens=False).input_ids[0] after checking it is one)")
    elif isinstance(tokens, float) or isinstance(tokens, bool):
        raise TypeError(f"{what} must be a token id (an int), got {type(tokens).__name__} {tokens!r}")
    elif torch.is_tensor(tokens) and tokens.ndim == 0 or isinstance(tokens, int) or (
            hasattr(tokens, "__index__") and not hasattr(tokens, "__len__")):
        ids = [_one_int(tokens, what)]
    else:
        try:
            items = tokens.reshape(-1) if torch.is_tensor(tokens) else tokens
            seq = [_one_int(t, f"{what} (an element)") for t in items]
        except TypeError as err:
            if "not iterable" in str(err):
                raise TypeError(f"{what} must be a token id (an int), got {type(tokens).__name__}") from err
            raise
        if not seq:
            raise ValueError(f"{what}: an empty list of token ids (one token id is needed)")
        if len(seq) > 1:
            raise ValueError(
                f"{what} is {len(seq)} token ids {seq}{_pieces(tokenizer, seq)}: the tracer's metric needs ONE "
                f"answer token, and a word of several tokens is not one (choose a word that is a single token). "
                f"To trace the mean logit of a set of tokens on purpose (e.g. Greater-Than's later years), "
                f"pass accpp.seeding.TokenSet({seq})")
        ids = seq
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise ValueError(f"{what} token id(s) {bad} outside the model's vocabulary (ids 0..{vocab - 1}, the rows of "
                         f"its unembedding)")
    return ids


def seeds(proj: torch.Tensor) -> torch.Tensor:
    """Indices of the ``"linear"`` seeds given the components' projections on the metric direction."""
    total = float(proj.sum())
    if total <= 0:
        return torch.zeros(0, dtype=torch.long)
    vals, order = torch.sort(proj, descending=True)
    cum = torch.cumsum(vals, 0)
    over = torch.nonzero(cum > total)
    cutoff = float(vals[int(over[0, 0])]) if over.numel() else float(vals[-1])
    cutoff = min(cutoff, total / 2)
    return order[vals >= cutoff]


def answer_direction(arch, dec, correct, wrong, pos: int, tokenizer=None) -> tuple[torch.Tensor, float]:
    """The ``"linear"`` seed direction in the final residual at ``pos``, and the metric it reads out.

    ``correct`` and ``wrong``: one token id each, or :class:`TokenSet` s. The metric is the mean logit
    of the correct ids minus the mean logit of the wrong ids (a plain logit difference for single
    tokens). It is linear in the unembedding, so it pulls back through the final norm to one direction.
    """
    vocab = arch.W_U.shape[0]
    c_ids, w_ids = answer_ids(correct, "correct", vocab, tokenizer), answer_ids(wrong, "wrong", vocab, tokenizer)
    both = sorted(set(c_ids) & set(w_ids))
    if both:
        raise ValueError(f"token id(s) {both}{_pieces(tokenizer, both)} in both the correct and the wrong answer: "
                         "the metric would compare a token with itself")
    delta = arch.unembed(c_ids).mean(0) - arch.unembed(w_ids).mean(0)
    L = arch.n_layers
    direction = arch.ln_final.fold(delta[:, None])[:, 0] / arch.ln_final.scale(dec.acts.resid[L, pos])
    logits = dec.acts.logits
    metric = float(logits[c_ids].mean() - logits[w_ids].mean())
    return direction, metric


# ------------------------------------------------------------------------------------------------
# "prob": Integrated Gradients of the answer's log-probability over the final residual's components
# ------------------------------------------------------------------------------------------------

def logit_lens(arch, vecs: torch.Tensor, resid: torch.Tensor) -> torch.Tensor:
    """u_c: residual components (N, d) read through the final norm at one position (``resid``: the
    whole residual there, (d,)), so that (sum_c u_c) W_U^T + bias-only logits = the model's logits."""
    ln = arch.ln_final
    u = ln.centred(vecs) if ln.kind == "layer" else vecs
    return u * ln.gain / ln.scale(resid)


def _to_vocab(arch, u: torch.Tensor) -> torch.Tensor:
    """u (k, d) float64 -> u W_U^T (k, V) float64, W_U converted in chunks."""
    W = arch.W_U
    out = torch.empty(u.shape[0], W.shape[0], dtype=torch.float64)
    for a in range(0, W.shape[0], _VOCAB_CHUNK):
        out[:, a:a + _VOCAB_CHUNK] = u @ W[a:a + _VOCAB_CHUNK].detach().to(torch.float64).T
    return out


def _from_vocab(arch, p: torch.Tensor) -> torch.Tensor:
    """p (k, V) float64 -> p W_U (k, d) float64."""
    W = arch.W_U
    out = torch.zeros(p.shape[0], W.shape[1], dtype=torch.float64)
    for a in range(0, W.shape[0], _VOCAB_CHUNK):
        out += p[:, a:a + _VOCAB_CHUNK] @ W[a:a + _VOCAB_CHUNK].detach().to(torch.float64)
    return out


def bias_logits(arch) -> torch.Tensor:
    """(V,) logits of a zero residual: the final norm's bias read out, plus the unembedding bias."""
    V = arch.W_U.shape[0]
    b = torch.zeros(V, dtype=torch.float64)
    if arch.ln_final.bias is not None:
        b += _to_vocab(arch, arch.ln_final.bias[None].to(torch.float64))[0]
    if arch.b_U is not None:
        b += arch.b_U
    return b


@dataclass
class ProbSeeds:
    """The ``"prob"`` seeds of one prompt."""

    idx: torch.Tensor  # (k,) selected component indices, in selection order
    attribution: torch.Tensor  # (N,) IG attribution of every component to J
    completeness: float  # C = J(clean) - J(bias only), nats
    drop: float  # J(clean) - J(clean without the seeds)
    target: float  # prob_tau * C
    reached: bool  # drop >= target
    log_prob: float  # J(clean)
    support: list  # the answer's token ids
    q: list  # their weights


def _J(z: torch.Tensor, support: torch.Tensor, q: torch.Tensor) -> float:
    return float((q * torch.log_softmax(z, -1)[support]).sum())


def prob_seeds(arch, vecs: torch.Tensor, resid: torch.Tensor, support: list[int], tau: float = 0.8,
               ig_steps: int = 64) -> ProbSeeds:
    """Seeds by the answer's log-probability (module docstring). ``vecs`` (N, d): the components of
    the final residual ``resid`` (d,) at the answer position; ``support``: the answer's token ids."""
    u = logit_lens(arch, vecs, resid)  # (N, d)
    b = bias_logits(arch)  # (V,)
    z_clean = _to_vocab(arch, u.sum(0, keepdim=True))[0]  # (V,)
    sup = torch.tensor(support, dtype=torch.long)
    p_clean = torch.softmax(z_clean + b, -1)[sup]
    q = p_clean / p_clean.sum()
    J_clean = _J(z_clean + b, sup, q)
    C = J_clean - _J(b, sup, q)
    N = vecs.shape[0]
    if not C > 0:
        return ProbSeeds(torch.zeros(0, dtype=torch.long), torch.zeros(N, dtype=torch.float64), C, 0.0, tau * C,
                         False, J_clean, list(support), q.tolist())
    alphas = torch.linspace(0.0, 1.0, ig_steps + 1, dtype=torch.float64)
    p_path = torch.softmax(b[None] + alphas[:, None] * z_clean[None], -1)  # (S+1, V)
    w_sup = q @ arch.unembed(support)  # (d,) = sum_t q_t W_U[t]
    grad_d = w_sup[None] - _from_vocab(arch, p_path)  # (S+1, d): d J / d u along the path
    w = torch.full((ig_steps + 1,), 1.0 / ig_steps, dtype=torch.float64)
    w[0] = w[-1] = 0.5 / ig_steps
    attribution = u @ (w @ grad_d)  # (N,)
    order = torch.argsort(attribution, descending=True, stable=True)
    z_run, chosen, drop, reached = z_clean.clone(), [], 0.0, False
    for i in order.tolist():
        if float(attribution[i]) <= 0:
            break
        z_run -= _to_vocab(arch, u[i:i + 1])[0]
        chosen.append(i)
        drop = J_clean - _J(z_run + b, sup, q)
        if drop >= tau * C:
            reached = True
            break
    return ProbSeeds(torch.tensor(chosen, dtype=torch.long), attribution, C, drop, tau * C, reached, J_clean,
                     list(support), q.tolist())
