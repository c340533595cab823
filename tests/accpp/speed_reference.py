"""Frozen copies of the ACC++ code as it was before the speed-ups of issue 35 (revision e2aecea), kept as
the references the same-results tests (tests/accpp/test_speedups*.py) compare the faster code with, on
the same inputs. Nothing here is used by the library."""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from accpp.acc import ACCConfig, _union_index, _union_labels, select_singular
from accpp.decompose import KIND_NAMES, visible
from accpp.interventions import Intervener, NotASignalEdge, SignalSpec
from accpp.datasets import IOIMetrics
from accpp.pronouns import PronounMetrics
from accpp.clustering import _basis, _dummies, _upper, adjusted_rand, cut, gower_centred, normalized_mutual_info
from accpp.clustering import permutation_test, within_between
from accpp.signals import FiringSolver


# ---------------------------------------------------------------- accpp.acc (ACC baseline contributors)
def acc_firing_contributors(solver: FiringSolver, arch, cfg: ACCConfig, L: int, a: int, d: int, s: int):
    """[(side, token, contributions (N,), labels (N, 4), kept singular indices)] for one firing;
    empty when the (comparative) score is not positive."""
    lw = arch.layers[L]
    J = visible(solver.dec.T, d, lw.sliding_window)
    n = len(J)
    s_idx = int(s - J[0])
    sig = solver.svd.S[L, a]
    Cq, lab_q = solver.token_coeffs(L, a, d, "q")
    alpha = Cq.sum(0)
    keys = [solver.key_coeffs(L, a, int(j)) for j in J]
    beta = torch.stack([c.sum(0) for c, _ in keys])  # (n, dh)
    if cfg.comparative:
        if n < 2:
            return []
        bref = beta[s_idx] - (beta.sum(0) - beta[s_idx]) / (n - 1)
    else:
        bref = beta[s_idx]
    c_k = lw.scale * sig * alpha * bref  # per singular direction, sums to the (comparative) score
    dh = sig.numel()
    mask = torch.ones(dh, dtype=c_k.dtype)
    K = list(range(dh))
    if cfg.select_singular:
        if not float(c_k.sum()) > 0:
            return []
        sel = select_singular(c_k, cfg.sv_fraction)
        mask = torch.zeros(dh, dtype=c_k.dtype)
        mask[sel] = 1
        K = sorted(sel.tolist())
    elif cfg.comparative and not float(c_k.sum()) > 0:
        return []
    w_q = lw.scale * sig * bref * mask  # query side: component coefficients . w_q
    contrib_q = Cq @ w_q
    w_k = lw.scale * sig * alpha * mask  # key side
    if cfg.comparative:
        H = lw.n_heads
        lab_u = _union_labels(L, H, d, keys[0][1], a)
        tot = torch.zeros(lab_u.shape[0], dtype=c_k.dtype)
        at_s = None
        for i, (Cj, lab_j) in enumerate(keys):
            y = torch.zeros(lab_u.shape[0], dtype=c_k.dtype).index_add_(0, _union_index(lab_j, L, H, d), Cj @ w_k)
            tot += y
            if i == s_idx:
                at_s = y
        contrib_k = at_s - (tot - at_s) / (n - 1)
        lab_k = lab_u
    else:
        Ck, lab_k = keys[s_idx]
        contrib_k = Ck @ w_k
    return [("d", d, contrib_q, lab_q, K), ("s", s, contrib_k, lab_k, K)]


# ---------------------------------------------------------------- accpp.interventions (signal removals)
class OldIntervener(Intervener):
    """The Intervener with the coefficient, clean-vector and least-squares methods as they were (no
    caches: every call rebuilds the full coefficient table of each row; one gelsd solve per row)."""

    def _coef_at(self, spec: SignalSpec, t: int) -> torch.Tensor | None:
        C, labels = self.solver.token_coeffs(spec.layer, spec.head, t, "q" if spec.side == "d" else "k")
        hit = torch.nonzero((labels == torch.tensor(spec.label)).all(-1))
        return C[int(hit[0, 0])] if hit.numel() == 1 else None

    def coefficients(self, spec: SignalSpec) -> torch.Tensor:
        """The component's coefficients on head (layer, head)'s singular directions at the signal's
        token(s): alpha_c (dh,) (query side), beta_{c,j} (dh,) (key side), or (n, dh) over the rows of
        :meth:`rows` for a spanning key-side signal (zeros where the component is absent: an upstream
        head's output from source j' exists at key positions >= j' only)."""
        self.validate(spec)
        rows = self.rows(spec)
        found = [self._coef_at(spec, t) for t in rows]
        if all(c is None for c in found):
            raise NotASignalEdge(
                f"{spec.describe()}: no component {KIND_NAMES.get(spec.kind)} (layer {spec.comp_layer}, head "
                f"{spec.comp_head}, source {spec.comp_src}) in the residual entering layer {spec.layer} at token "
                f"{spec.token}" + (" or any other visible key position" if spec.span else ""))
        if not spec.span:
            return found[0]
        dh = self.arch.d_head
        return torch.stack([c if c is not None else torch.zeros(dh, dtype=torch.float64) for c in found])

    def _input_delta_at(self, spec: SignalSpec, t: int, delta: torch.Tensor) -> torch.Tensor:
        L, lw = spec.layer, self.arch.layers[spec.layer]
        side = "q" if spec.side == "d" else "k"
        v = delta
        if self.dec.rot[L] is not None:
            v = torch.linalg.solve(self.dec.rot[L][t].mT, v)  # undo v -> v R_t
        norm = lw.q_norm if side == "q" else lw.k_norm
        if norm is not None:
            rho = self.dec.rho_q(L)[t, spec.head] if side == "q" else self.dec.rho_k(L)[t, lw.kv_of(spec.head)]
            g = norm.gain
            v = torch.where(g != 0, v / torch.where(g != 0, g, torch.ones_like(g)), torch.zeros_like(v)) * rho
        W = lw.wq_eff(spec.head) if side == "q" else lw.wk_eff(lw.kv_of(spec.head))
        # gelsd (SVD): the default CPU driver, gelsy, reads an uninitialised pivot array in torch and can
        # return rank 0 on exactly repeated or zero rows of W (pytorch/pytorch#71222)
        return torch.linalg.lstsq(W.T, v[:, None], driver="gelsd").solution[:, 0]

    def _clean_vec(self, L: int, a: int, t: int, side: str) -> torch.Tensor:
        """qf_t (side "q") or head a's kf_t (side "k") of the clean run, from the decomposition."""
        B = (self.solver.svd.Ut if side == "q" else self.solver.svd.Vt)[L, a]
        return torch.linalg.solve(B.mT, self.solver.token_coeffs(L, a, t, side)[0].sum(0))

    def _clean_head_vector(self, spec: SignalSpec) -> torch.Tensor:
        """qf_d (query side) or kf_j (key side; every row of :meth:`rows` when spanning) of the clean
        run, from the decomposition."""
        side = "q" if spec.side == "d" else "k"
        B = (self.solver.svd.Ut if side == "q" else self.solver.svd.Vt)[spec.layer, spec.head]
        out = [torch.linalg.solve(B.mT, self.solver.token_coeffs(spec.layer, spec.head, t, side)[0].sum(0))
               for t in self.rows(spec)]
        return torch.stack(out) if spec.span else out[0]


# ---------------------------------------------------------------- accpp.clustering (PERMANOVA, label alignment)
def permanova(D, factors: dict, covariates: dict | None = None, interaction: bool = True, n_perm: int = 999,
              seed: int = 0) -> pd.DataFrame:
    """Distance-based (permutational) multivariate ANOVA (Anderson 2001; McArdle & Anderson 2001).

    ``factors``: one or two labellings ({"template": [...], "order": [...]}); ``covariates``: numeric
    per-item values (e.g. {"size": circuit sizes}); with two factors and ``interaction`` their
    interaction is a term too. Sums of squares are traces of the hat matrices against the
    Gower-centred matrix G (:func:`gower_centred`). Each term is tested adjusted for every other term
    that does not contain it ("type II": a main effect given the covariates and the other factor, the
    interaction given everything else), against the residual of the complete model:

        F = (SS_term / df_term) / (SS_res / df_res).

    p-values: Freedman-Lane permutation of the residuals of the reduced model (the model without the
    term), ``n_perm`` seeded permutations, p = (1 + n_extreme) / (n_perm + 1) with n_extreme = #{F* >= F}
    (:func:`compendium.stats.permutation_p`; n_extreme is kept for the p's Monte-Carlo interval). In distance form the
    permuted data are G* = M G M' with M = H_r + P (I - H_r) (H_r: hat matrix of the reduced model,
    P: the permutation), so no embedding of the distances is needed and non-Euclidean distances are
    handled as they are.

    Returns a DataFrame indexed by term (then "Residual", "Total") with df, SS, R2 (SS / SS_total), F, p,
    n_extreme (NaN where nothing is tested: no permutations, a term without degrees of freedom, the
    residual and total rows).
    """
    from compendium.stats import permutation_p

    G = gower_centred(D)
    n = len(G)
    if not 1 <= len(factors) <= 2:
        raise ValueError("permanova takes one or two factors")
    covariates = covariates or {}
    terms: dict[str, tuple[np.ndarray, set]] = {}
    for name, vals in covariates.items():
        v = np.asarray(vals, dtype=float)
        if v.shape != (n,):
            raise ValueError(f"covariate {name!r} has shape {v.shape}, expected ({n},)")
        terms[name] = ((v - v.mean())[:, None], {name})
    dums = {}
    for name, lab in factors.items():
        if len(lab) != n:
            raise ValueError(f"factor {name!r} has {len(lab)} labels for {n} items")
        dums[name] = _dummies(lab)
        terms[name] = (dums[name], {name})
    if interaction and len(factors) == 2:
        a, b = list(factors)
        X = np.stack([dums[a][:, i] * dums[b][:, j] for i in range(dums[a].shape[1]) for j in range(dums[b].shape[1])],
                     1) if dums[a].shape[1] and dums[b].shape[1] else np.zeros((n, 0))
        terms[f"{a} x {b}"] = (X, {a, b})
    one = np.ones((n, 1))

    def design(names):
        return np.hstack([one] + [terms[t][0] for t in names])

    Qc = _basis(design(list(terms)))
    df_res = n - Qc.shape[1]
    if df_res <= 0:
        raise ValueError(f"no residual degrees of freedom ({n} items, model rank {Qc.shape[1]})")
    ss_total = float(np.trace(G))
    rng = np.random.default_rng(seed)
    perms = [rng.permutation(n) for _ in range(n_perm)]
    rows = {}
    for t, (_, tset) in terms.items():
        reduced = [u for u, (_, uset) in terms.items() if u != t and not tset <= uset]
        Qr = _basis(design(reduced))
        Qa = _basis(design(reduced + [t]))
        df_t = Qa.shape[1] - Qr.shape[1]
        if df_t <= 0:
            rows[t] = dict(df=0, SS=0.0, R2=0.0, F=float("nan"), p=float("nan"), n_extreme=float("nan"))
            continue
        Hr = Qr @ Qr.T
        E = np.eye(n) - Hr
        HrQ = {k: Hr @ Q for k, Q in (("a", Qa), ("r", Qr), ("c", Qc))}
        EG = E @ G
        tr_fixed = float(np.trace(Hr @ G @ Hr) + np.trace(EG @ E))
        C = EG @ Hr  # tr(P E G H_r) = sum_i C[perm[i], i]

        def stat(perm):
            inv = np.empty(n, dtype=int)
            inv[perm] = np.arange(n)
            tr = {}
            for k, Q in (("a", Qa), ("r", Qr), ("c", Qc)):
                W = HrQ[k] + E @ Q[inv]  # M' Q, with (P' Q) = Q[inv]
                tr[k] = float(np.einsum("ij,ij->", W, G @ W))
            tr_all = tr_fixed + 2.0 * float(C[perm, np.arange(n)].sum())
            ss_t, ss_r = tr["a"] - tr["r"], tr_all - tr["c"]
            return (ss_t / df_t) / (ss_r / df_res) if ss_r > 0 else float("inf"), ss_t, ss_r

        F, ss_t, ss_r = stat(np.arange(n))
        null = np.array([stat(p)[0] for p in perms])
        n_extreme = int((null >= F - 1e-12 * abs(F)).sum()) if n_perm else float("nan")
        pval = permutation_p(n_extreme, n_perm) if n_perm else float("nan")
        rows[t] = dict(df=df_t, SS=ss_t, R2=ss_t / ss_total if ss_total > 0 else float("nan"), F=F, p=pval,
                       n_extreme=n_extreme)
    ss_res = ss_total - float(np.einsum("ij,ij->", Qc, G @ Qc))
    rows["Residual"] = dict(df=df_res, SS=ss_res, R2=ss_res / ss_total if ss_total > 0 else float("nan"),
                            F=float("nan"), p=float("nan"), n_extreme=float("nan"))
    rows["Total"] = dict(df=n - 1, SS=ss_total, R2=1.0, F=float("nan"), p=float("nan"), n_extreme=float("nan"))
    return pd.DataFrame.from_dict(rows, orient="index")


# ---------------------------------------------------------------- figures


def label_alignment(D, Z: np.ndarray, labels, n_perm: int = 999, seed: int = 0, k: int | None = None,
                    strata=None) -> dict:
    """How well a labelling explains the distances and the clustering: the k-cluster cut (k = number
    of distinct labels by default) scored by ARI and NMI, within- and between-label mean distances,
    and permutation p-values for the ARI and for the gap (between - within)."""
    names, lab = np.unique(np.asarray(labels, dtype=object).astype(str), return_inverse=True)  # integer codes
    k = k or len(names)
    clusters = cut(Z, k)
    ari, p_ari, _ = permutation_test(lambda x: adjusted_rand(clusters, x), lab, n_perm, seed, strata)

    (i, j), m = _upper(D)
    d = m[i, j]

    def gap(x):
        same = x[i] == x[j]
        return float(d[~same].mean() - d[same].mean())

    g, p_gap, _ = permutation_test(gap, lab, n_perm, seed, strata)
    within, between = within_between(D, lab)
    return dict(k=k, ari=ari, p_ari=p_ari, nmi=normalized_mutual_info(clusters, lab), within=within,
                between=between, gap=g, p_gap=p_gap)


# ---------------------------------------------------------------- accpp.datasets (evaluation)
@torch.no_grad()
def evaluate(model, prompts) -> IOIMetrics:
    """Logit difference and P(IO) at the last position; prompts of equal length run batched."""
    ld = torch.empty(len(prompts), dtype=torch.float64)
    p = torch.empty(len(prompts), dtype=torch.float64)
    by_len: dict[int, list[int]] = {}
    for i, pr in enumerate(prompts):
        by_len.setdefault(len(pr.input_ids), []).append(i)
    for idx in by_len.values():
        ids = torch.tensor([prompts[i].input_ids for i in idx])
        logits = model(ids).logits[:, -1].double()
        lp = torch.log_softmax(logits, -1)
        io = torch.tensor([prompts[i].io_id for i in idx])
        s = torch.tensor([prompts[i].s_id for i in idx])
        r = torch.arange(len(idx))
        ld[idx] = logits[r, io] - logits[r, s]
        p[idx] = lp[r, io].exp()
    return IOIMetrics(ld, p)


# ---------------------------------------------------------------- accpp.pronouns (evaluation)
@torch.no_grad()
def pronoun_evaluate(model, prompts) -> PronounMetrics:
    """Logit difference at the last position; prompts of equal length run as one batch."""
    if not prompts:
        raise ValueError("evaluate: no prompts")
    device = next(model.parameters()).device
    ld = torch.empty(len(prompts), dtype=torch.float64)
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p.input_ids), []).append(i)
    for idx in by_len.values():
        ids = torch.tensor([prompts[i].input_ids for i in idx], device=device)
        logits = model(ids).logits[:, -1].double().cpu()  # (b, vocab)
        r = torch.arange(len(idx))
        c = torch.tensor([prompts[i].correct_id for i in idx])
        w = torch.tensor([prompts[i].wrong_id for i in idx])
        ld[idx] = logits[r, c] - logits[r, w]
    return PronounMetrics(ld, torch.tensor([p.gender == "male" for p in prompts]), tuple(p.family for p in prompts))
