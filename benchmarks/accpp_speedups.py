"""Old and new code side by side (issue 35), for ``benchmarks/bench_accpp.py --speedups``.

CPU seconds (``time.process_time``, one torch thread), each timed piece run by the code as it was
(the frozen copies in tests/accpp/speed_reference.py, with every layer's rotation matrices built as
before) and by the library's code, on the same inputs, in one process:

- trace: one ACC++ trace per prompt (``ioi.trace_ioi``, median over 6 prompts, old and new in turn on
  each); the old decomposition built the rotation matrices of every layer;
- acc: one ACC baseline (``acc.acc_trace``, the authors' ACC) per prompt;
- removal: one signal removal (``Intervener.remove``), averaged over what notebook 04 runs per edge
  (``compare_subspaces`` with its three controls), the Intervener built outside the timing;
- evaluate: ``datasets.evaluate`` per prompt (old: logits at every position of a whole length group);
- permanova: one permutation of notebook 05's PERMANOVA (template, order, interaction, size) at its
  paper size n; the old per-permutation work replayed as the old code did it (six (n x n)(n x p)
  products per term), the new as the difference of two library runs (8 and 40 permutations);
- label alignment: one permutation of ``clustering.label_alignment`` (ARI and gap), at the same n: the
  old per-permutation statistics replayed as the old code computed them, the new on a batch.

The projection multiplies these by the counts of the registered paper protocol (papers/accpp/claims.yaml)
of the notebooks whose time they dominate: 01 (traces, ACC baselines, evaluation), 04 (traces,
removals), 05 (traces, evaluation, PERMANOVA and label-alignment permutations). Other parts of the
notebooks (figures, nulls, bootstrap intervals, model loading) are not in it.
"""
from __future__ import annotations

import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _reference():
    sys.path.insert(0, str(ROOT / "tests" / "accpp"))
    import speed_reference

    return speed_reference


@contextmanager
def old_code():
    """The tracer as it was: every layer's rotation matrices built with the decomposition, the ACC
    contributors and the Intervener's coefficient / least-squares methods of before."""
    from accpp import acc, decompose

    ref = _reference()

    class Eager(decompose.LazyRotations):
        def __init__(self, rotary, dh):
            super().__init__(rotary, dh)
            for L in range(len(self)):
                self[L]

    saved = decompose.LazyRotations, acc._firing_contributors
    decompose.LazyRotations, acc._firing_contributors = Eager, ref.acc_firing_contributors
    try:
        yield ref
    finally:
        decompose.LazyRotations, acc._firing_contributors = saved


def _cpu(fn):
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def measure_model(name: str, n_trace: int = 6, n_acc: int = 2, n_removal_prompts: int = 1, n_eval: int = 64) -> dict:
    import torch

    torch.set_num_threads(1)
    from accpp import acc, datasets, ioi
    from accpp.interventions import CONTROLS, Intervener, compare_subspaces, top_seed_edges
    from accpp.models import load_model
    from accpp.trace import Tracer

    model, tok = load_model(name)
    tracer = Tracer(model, tok, name=name)
    _ = tracer.svd  # cached per model
    prompts = datasets.ioi_mixed(tok, n=max(n_trace, n_acc, n_removal_prompts) + 1, seed=0)
    ioi.trace_ioi(tracer, prompts[-1])  # warm-up, not counted
    out = dict(model=name)

    def both(fn):
        with old_code() as ref:
            t_old = fn(ref, old=True)
        return t_old, fn(None, old=False)

    olds, news = [], []
    for p in prompts[:n_trace]:  # old and new in turn on each prompt (the machine's load drifts)
        with old_code():
            olds.append(_cpu(lambda p=p: ioi.trace_ioi(tracer, p))[0])
        news.append(_cpu(lambda p=p: ioi.trace_ioi(tracer, p))[0])
    out["trace"] = dict(old=statistics.median(olds), new=statistics.median(news))

    def acc_base(_ref, old):
        return statistics.median(_cpu(lambda p=p: acc.acc_trace(tracer, torch.tensor(p.input_ids), p.io_id, p.s_id))[0]
                                 for p in prompts[:n_acc])

    def removal(ref, old):
        secs, n = 0.0, 0
        for p in prompts[:n_removal_prompts]:
            c = ioi.trace_ioi(tracer, p)
            cls = ref.OldIntervener if old else Intervener
            iv = cls(tracer, torch.tensor(p.input_ids), p.io_id, p.s_id)
            for spec in top_seed_edges(c.graph, 2, "authors"):
                dt, rows = _cpu(lambda spec=spec, iv=iv: compare_subspaces(iv, spec, 2, seed=0, controls=CONTROLS))
                secs, n = secs + dt, n + len(rows)
        return secs / max(n, 1)

    eval_prompts = datasets.ioi_mixed(tok, n=n_eval, seed=3)

    def evaluate(ref, old):
        fn = ref.evaluate if old else datasets.evaluate
        return _cpu(lambda: fn(model, eval_prompts))[0] / len(eval_prompts)

    for key, fn in (("acc", acc_base), ("removal", removal), ("evaluate", evaluate)):
        o, nw = both(fn)
        out[key] = dict(old=o, new=nw)
    return out


def _distances(n: int, seed: int = 0):
    import numpy as np

    from accpp import clustering as cl

    rng = np.random.default_rng(seed)
    K = 15
    tpl = np.repeat(np.arange(K), n // K)
    order = np.tile(["ABBA", "BABA"], n // 2)
    X = rng.random((n, 60)) < (0.15 + 0.01 * tpl[:, None])
    inter = (X[:, None, :] & X[None]).sum(-1)
    union = (X[:, None, :] | X[None]).sum(-1)
    D = 1.0 - inter / np.maximum(union, 1)
    np.fill_diagonal(D, 0.0)
    return cl, D, tpl, order, X.sum(1).astype(float)


def _old_permutation_seconds(D, factors, covariates, reps: int = 1) -> float:
    """The old code's work for one permutation (every term: for Q in Q_a, Q_r, Q_c, W = H_r Q + E Q[inv]
    and tr(W' G W), plus the gathered trace), set up as the old code set it up."""
    import numpy as np

    ref = _reference()
    G = ref.gower_centred(D)
    n = len(G)
    terms = {name: ((v - v.mean())[:, None], {name}) for name, v in covariates.items()}
    dums = {name: ref._dummies(lab) for name, lab in factors.items()}
    terms.update({name: (dums[name], {name}) for name in factors})
    a, b = list(factors)
    terms[f"{a} x {b}"] = (np.stack([dums[a][:, i] * dums[b][:, j] for i in range(dums[a].shape[1])
                                     for j in range(dums[b].shape[1])], 1), {a, b})
    one = np.ones((n, 1))
    design = lambda names: np.hstack([one] + [terms[t][0] for t in names])  # noqa: E731
    Qc = ref._basis(design(list(terms)))
    setups = []
    for t, (_, tset) in terms.items():
        reduced = [u for u, (_, uset) in terms.items() if u != t and not tset <= uset]
        Qr, Qa = ref._basis(design(reduced)), ref._basis(design(reduced + [t]))
        Hr = Qr @ Qr.T
        E = np.eye(n) - Hr
        setups.append((E, {k: Hr @ Q for k, Q in (("a", Qa), ("r", Qr), ("c", Qc))}, (Qa, Qr, Qc), E @ G @ Hr))
    rng = np.random.default_rng(1)
    t0 = time.process_time()
    for _ in range(reps):
        perm = rng.permutation(n)
        inv = np.empty(n, dtype=int)
        inv[perm] = np.arange(n)
        for E, HrQ, Qs, C in setups:
            for k, Q in zip("arc", Qs):
                W = HrQ[k] + E @ Q[inv]
                float(np.einsum("ij,ij->", W, G @ W))
            float(C[perm, np.arange(n)].sum())
    return (time.process_time() - t0) / reps


def _old_label_alignment_seconds(D, Z, labels, k: int) -> float:
    """The old code's work for one permutation of ``label_alignment``: scikit-learn's ARI of the cut
    against the shuffled labels, and the gap from boolean masks over the n(n-1)/2 pairs."""
    import numpy as np

    ref = _reference()
    names, lab = np.unique(np.asarray(labels, dtype=object).astype(str), return_inverse=True)
    clusters = ref.cut(Z, len(names))
    (i, j), m = ref._upper(D)
    d = m[i, j]
    rows = [np.random.default_rng(r).permutation(lab) for r in range(k)]
    ref.adjusted_rand(clusters, lab)  # warm-up (imports), not counted
    t0 = time.process_time()
    for x in rows:
        ref.adjusted_rand(clusters, x)
        same = x[i] == x[j]
        float(d[~same].mean() - d[same].mean())
    return (time.process_time() - t0) / k


def _new_label_alignment_seconds(D, Z, labels, k: int) -> float:
    """The library's work for ``k`` permutations of ``label_alignment`` (both statistics at once), per permutation."""
    import numpy as np

    from accpp import clustering as cl

    names, lab = np.unique(np.asarray(labels, dtype=object).astype(str), return_inverse=True)
    clusters = cl.cut(Z, len(names))
    X = np.stack([np.random.default_rng(r).permutation(lab) for r in range(k)])
    cl._ari_rows(clusters, X[:1])  # warm-up, not counted
    t0 = time.process_time()
    cl._ari_rows(clusters, X)
    cl._gap_rows(D, X)
    return (time.process_time() - t0) / k


def measure_stats(n: int, perms_new: tuple[int, int] = (8, 40), n_la_old: int = 8, n_la_new: int = 64) -> dict:
    cl, D, tpl, order, size = _distances(n)
    factors, cov = {"template": tpl, "order": order}, {"size": size}
    old_perm = _old_permutation_seconds(D, factors, cov, reps=2)
    lo, hi = perms_new  # the difference of two runs: the set-up (Gower centring, bases) cancels
    t0, _ = _cpu(lambda: cl.permanova(D, factors, cov, n_perm=lo))
    t1, _ = _cpu(lambda: cl.permanova(D, factors, cov, n_perm=hi))
    new_perm = max(t1 - t0, 0.0) / (hi - lo)
    Z = cl.average_linkage(D)
    return dict(n=n, permanova=dict(old=old_perm, new=new_perm),
                label_alignment=dict(old=_old_label_alignment_seconds(D, Z, tpl, n_la_old),
                                     new=_new_label_alignment_seconds(D, Z, tpl, n_la_new)))


def paper_counts() -> dict:
    """Work counts of the paper protocol (papers/accpp/claims.yaml) per notebook."""
    import yaml

    claims = yaml.safe_load((ROOT / "papers" / "accpp" / "claims.yaml").read_text(encoding="utf-8"))["claims"]
    proto = {c["notebook"]: c["protocol"] for c in claims if c.get("protocol")}
    p1 = proto["accpp/01_ioi"]["paper"]
    p4 = next(c["protocol"] for c in claims if c["notebook"] == "accpp/04_signal_interventions" and c.get("protocol"))
    p4 = p4["paper"]
    p5 = next(c["protocol"] for c in claims if c["notebook"] == "accpp/05_ioi_template_clusters" and c.get("protocol"))
    n_perm = p5.get("all", {}).get("n_perm", 999)
    p5 = p5["paper"]
    n5 = len(p5["templates"]) * 2 * p5["per_cell"]
    from accpp.interventions import CONTROLS

    return {
        "accpp/01_ioi": dict(model=p1["model"], trace=p1["n_trace"], acc=2 * p1["n_acc"],  # authors' ACC and legacy
                             evaluate=p1["n_behaviour"] + p1["n_family"]),
        "accpp/04_signal_interventions": dict(model=p4["model"], trace=p4["n_prompts"], evaluate=p4["n_candidates"],
                                              removal=p4["n_prompts"] * p4["edges_per_prompt"]
                                              * (1 + len(CONTROLS) * p4["n_random"])),
        "accpp/05_ioi_template_clusters": dict(model=p5["model"], trace=n5, evaluate=len(p5["templates"]) * 2 * p5["drawn"],
                                               permanova=2 * n_perm, label_alignment=2 * 2 * n_perm, n=n5),
    }


def project(models: dict, stats: dict, counts: dict) -> list[dict]:
    rows = []
    for nb, c in counts.items():
        m = models.get(c["model"], {})
        row = dict(notebook=nb, model=c["model"], old=0.0, new=0.0, parts={})
        for key, k in c.items():
            if key in ("model", "n"):
                continue
            per = m.get(key) or stats.get(key)
            if per is None:
                continue
            row["parts"][key] = dict(count=k, old_s=k * per["old"], new_s=k * per["new"])
            row["old"] += k * per["old"]
            row["new"] += k * per["new"]
        rows.append(row)
    return rows


def report(models: list[dict], stats: dict, counts: dict) -> list[str]:
    lines = ["per-prompt CPU seconds, 1 torch thread (old | new | old/new):"]
    for m in models:
        for key in ("trace", "acc", "removal", "evaluate"):
            o, n = m[key]["old"], m[key]["new"]
            what = {"trace": "ACC++ trace", "acc": "ACC baseline", "removal": "one signal removal",
                    "evaluate": "evaluate (per prompt)"}[key]
            lines.append(f"  {m['model']:14s} {what:22s} {o:9.4f} | {n:9.4f} | {o / n if n else float('inf'):6.2f}x")
    for key, what in (("permanova", "one PERMANOVA permutation"), ("label_alignment", "one label-alignment permutation")):
        o, n = stats[key]["old"], stats[key]["new"]
        lines.append(f"  {'n=' + str(stats['n']):14s} {what:22s} {o:9.4f} | {n:9.4f} | {o / n if n else float('inf'):6.2f}x")
    by_name = {m["model"]: m for m in models}
    lines.append("projected paper profile (registered paper protocol; measured parts only), one core, minutes:")
    tot_o = tot_n = 0.0
    for row in project(by_name, stats, counts):
        parts = ", ".join(f"{k} {v['count']} x" for k, v in row["parts"].items())
        lines.append(f"  {row['notebook']:32s} {row['model']:14s} old {row['old'] / 60:7.1f} | new {row['new'] / 60:7.1f}"
                     f"   ({parts})")
        tot_o, tot_n = tot_o + row["old"], tot_n + row["new"]
    lines.append(f"  {'total':32s} {'':14s} old {tot_o / 60:7.1f} | new {tot_n / 60:7.1f}")
    return lines
