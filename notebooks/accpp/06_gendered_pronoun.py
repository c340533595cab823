# %% [markdown]
# # ACC++ 06: gendered-pronoun circuits
#
# **Claim (accpp, §4 and §5, gendered pronouns; three claims):** the paper's third task is gendered pronouns: after
# "So {name} is a really great friend, isn't" the model should prefer " he" for a male name and " she"
# for a female one. ACC++ traces a circuit per prompt, and its circuits are 2-10x smaller than those of
# its predecessor ACC on the same prompts (the paper's statement over all its tasks). Three claims are
# checked here, each with a check written in papers/accpp/claims.yaml before this notebook first ran:
#
# 1. `pronoun-behaviour`: the model does the task (mean logit difference logit(correct pronoun) -
#    logit(other) > 0, with accuracy >= 0.8); the other two claims take this as a precondition.
# 2. `pronoun-smaller-than-acc`: mean ACC / ACC++ node ratio in the paper's range [2, 10].
# 3. `pronoun-name-paths`: the pronoun's direct effect traces back to the name token. Head seeds are the
#    head outputs at the answer position (split per source token) that the tracer keeps as seeds; a head
#    seed reaches token p when its firing or an ancestor in the circuit is a head firing whose source is
#    p. The check: most of the head seeds' positive attribution reaches the name, and more reaches the
#    name than any other token (except position 0 and the answer position).
#
# **The task's source and our prompts.** The paper takes the task from ACC (Franco & Crovella, NeurIPS 2025), whose code
# (`gp_dataset.py` in the authors' ACC repository) builds 5 templates x (10 male + 10 female names) with
# answers " he" / " she", adapted from Mathwin and Corlouer's gendered-pronoun circuit study in GPT-2 small
# (2023). Ours (`accpp.pronouns`): five templates of our own in the same shape, and our own 12 + 12 names,
# kept where they are single tokens for the model in use (module docstring).
#
# **Checked here:** at `cpu`: SmolLM2-135M, every
# template x name for behaviour, 4 traced prompts (2 male, 2 female) compared with ACC. At `paper`: both
# offline models (SmolLM2-135M, Gemma-3-270M), 40 traced prompts each, 16 of them compared with ACC.

# %% tags=["parameters"]
PROFILE = "cpu"
SEED = 0
DEVICE = "cpu"
MODELS = ""  # comma-separated model names to use instead of the profile's

# %%
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from accpp import families, figures, viewer
from accpp import pronouns as pr
from accpp.acc import acc_trace
from accpp.graph import save_circuit
from accpp.models import load_model
from accpp.trace import Tracer
from compendium import claims, notebook, paths, plotting, profiles

nb = notebook.start("accpp/06_gendered_pronoun", PROFILE, SEED, DEVICE, threads=1)
MODEL_LIST = ([m.strip() for m in MODELS.split(",") if m.strip()] or
              profiles.pick(nb.profile, cpu=["smollm2-135m"], paper=["smollm2-135m", "gemma-3-270m"]))
N_TRACE = profiles.pick(nb.profile, cpu=4, paper=40)
N_ACC = profiles.pick(nb.profile, cpu=4, paper=16)
OUT = paths.output_dir() / "accpp" / "06_gendered_pronoun"
OUT.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## 1. Behaviour, ACC++ circuits and the ACC baseline, per model
# Behaviour on every template x name. Traced prompts: a seeded sample of the prompts the model solves,
# half male and half female names, spread over the templates (`pronouns.balanced_sample`). ACC is the
# authors' ACC (`accpp.acc`, default config) on the first `N_ACC` of them; sizes are graph node counts.

# %%
results, family_rows = {}, []
for name in MODEL_LIST:
    t0 = time.perf_counter()
    model, tok = load_model(name, device=nb.device)
    prompts = pr.pronoun_prompts(tok)
    metrics = pr.evaluate(model, prompts)
    for fam_name in families.PRONOUN_FAMILIES:  # behaviour per template family (section 1b; not a claim)
        fam_prompts = families.pronoun_family_set(tok, fam_name)
        family_rows.append(families.behaviour_table(fam_prompts, pr.evaluate(model, fam_prompts).logit_diff,
                                                    by=("family", "answer_in_prompt"), model=name))
    solved = [p for p, ld in zip(prompts, metrics.logit_diff.tolist()) if ld > 0]
    chosen = pr.balanced_sample(solved, N_TRACE, seed=nb.seed)
    tracer = Tracer(model, tok, name=name)
    circuits = [pr.trace_pronoun(tracer, p) for p in chosen]
    sizes = pd.DataFrame([pr.size_row(p, c, acc_trace(tracer, p.ids(), p.correct_id, p.wrong_id))
                          for p, c in zip(chosen[:N_ACC], circuits[:N_ACC])])
    results[name] = dict(prompts=prompts, metrics=metrics, chosen=chosen, circuits=circuits, sizes=sizes,
                         paths=pr.name_paths(circuits), tokens=circuits[0].tokens, seconds=time.perf_counter() - t0)
    biggest = max(range(len(circuits)), key=lambda i: circuits[i].graph.number_of_nodes())
    save_circuit(circuits[biggest], OUT / f"circuit_{name}.json")
    print(f"{name}: {len(prompts)} prompts, e.g. {prompts[0].text!r}; {len(circuits)} traced, "
          f"{len(sizes)} compared with ACC; {results[name]['seconds']:.0f} s")
    del model, tracer

behaviour = pd.DataFrame({m: r["metrics"].summary() for m, r in results.items()}).T
behaviour.round(3)

# %%
rows = [dict(model=m, template=pr.TEMPLATES[p.template].replace("{name}", "X"), gender=p.gender, logit_diff=ld)
        for m, r in results.items() for p, ld in zip(r["prompts"], r["metrics"].logit_diff.tolist())]
beh_df = pd.DataFrame(rows)
fig, axes = plt.subplots(1, len(results), figsize=(6.5 * len(results), 4.2), squeeze=False)
for ax, m in zip(axes[0], results):
    sns.stripplot(data=beh_df[beh_df.model == m], y="template", x="logit_diff", hue="gender", dodge=True,
                  palette={"male": "#4C72B0", "female": "#C44E52"}, size=4, ax=ax)
    ax.axvline(0, color="0.3", lw=1)
    ax.set(xlabel="logit(correct pronoun) - logit(other)", ylabel="",
           title=f"{m}: accuracy {results[m]['metrics'].accuracy:.2f}")
fig.suptitle("Gendered pronouns: per-prompt logit difference by template and the name's gender")
plotting.savefig(fig, "accpp/06_gendered_pronoun_behaviour", profile=nb.profile)

# %% [markdown]
# ### 1b. Behaviour per template family (recorded apart from the claims)
# The claims above use our five "So {name} is ..., isn't" templates (family `so`). The same task in
# other wordings (`accpp.families`): `other` (five of ours, the name inside the sentence) and
# `initial` (the `so` templates without "So", so the name begins the prompt and is written without
# its leading space, possibly as several tokens). `answer_in_prompt` says whether the pronoun's token
# occurs in the prompt. Every template x usable name per family; not a claim's check; saved as
# `06_gendered_pronoun_behaviour_by_family.csv`.

# %%
by_family = pd.concat(family_rows, ignore_index=True)
by_family.to_csv(nb.out / "06_gendered_pronoun_behaviour_by_family.csv", index=False)
by_family.round(3)

# %% [markdown]
# ## 2. One circuit per model
# The largest traced circuit of each model (red: seeds; blue: query-side signals; orange dashed: key-side).

# %%
fig, axes = plt.subplots(len(results), 1, figsize=(10, 7 * len(results)), squeeze=False)
for ax, (m, r) in zip(axes[:, 0], results.items()):
    c = max(r["circuits"], key=lambda c: c.graph.number_of_nodes())
    figures.draw_circuit(c.graph, c.tokens, ax=ax, title=f"{m}: {c.meta['text']!r} -> {pr.PRONOUNS[c.meta['gender']]!r}")
fig.suptitle("ACC++ gendered-pronoun circuits (largest traced prompt per model)")
plotting.savefig(fig, "accpp/06_gendered_pronoun_circuit", profile=nb.profile)

circuit_table = pd.DataFrame([dict(model=m, text=c.meta["text"], gender=c.meta["gender"], logit_diff=c.logit_diff,
                                   nodes=c.graph.number_of_nodes(), firings=c.n_firings,
                                   head_seeds=len(pr.head_seeds(c.graph)), seconds=c.seconds)
                              for m, r in results.items() for c in r["circuits"]])
circuit_table.round(3)

# %% [markdown]
# The same circuits in the interactive viewer, one page per model (also saved beside the figures as
# `accpp/06_gendered_pronoun_circuit_<model>_viewer.html`; they open in any browser without a network).

# %%
for m, r in results.items():
    c = max(r["circuits"], key=lambda c: c.graph.number_of_nodes())
    viewer.save(c, f"accpp/06_gendered_pronoun_circuit_{m}",
                title=f"{m}: {c.meta['text']!r} -> {pr.PRONOUNS[c.meta['gender']]!r}")

# %% [markdown]
# ## 3. ACC++ against ACC on the same prompts
# Node counts of both circuits per prompt; the grey band is the paper's range of ratios (2-10x).

# %%
size_df = pd.concat([r["sizes"].assign(model=m) for m, r in results.items()], ignore_index=True)
fig, ax = plt.subplots(figsize=(5.8, 4.6))
lim = [1, max(size_df["acc_nodes"].max(), size_df["accpp_nodes"].max()) * 2]
xs = np.geomspace(*lim, 50)
ax.fill_between(xs, 2 * xs, 10 * xs, color="0.9", label="paper: ACC 2-10x larger")
ax.plot(xs, xs, color="0.5", lw=1, ls=":", label="equal size")
sns.scatterplot(data=size_df, x="accpp_nodes", y="acc_nodes", hue="model", style="gender", s=60, ax=ax)
ax.set(xscale="log", yscale="log", xlim=lim, ylim=lim, xlabel="ACC++ nodes", ylabel="ACC nodes",
       title=f"mean ACC / ACC++ ratio {size_df['ratio'].mean():.1f} over {len(size_df)} prompts")
ax.legend(fontsize=7)
plotting.savefig(fig, "accpp/06_gendered_pronoun_sizes", profile=nb.profile)
size_df.drop(columns=["text"]).round(2)

# %% [markdown]
# ## 4. Where the head seeds' attribution comes from
# For every token: the share of the head seeds' positive attribution whose firing, or an ancestor firing
# in the circuit, reads that token (pooled over each model's traced prompts; `pronouns.name_paths`).
# Shares of different tokens overlap (one path can read several tokens), so they need not sum to one.
# The hatched bar is the part read directly from the answer position at the name. MLPs are leaves of
# ACC++ circuits (the paper's rule), so information that attention moves from the name to a later token
# and that token's MLPs then rewrite reaches the answer through a path that ends at those MLPs: such a
# path counts for the later token, not for the name.

# %%
fig, axes = plt.subplots(1, len(results), figsize=(6.5 * len(results), 3.8), squeeze=False)
for ax, (m, r) in zip(axes[0], results.items()):
    res, toks = r["paths"], r["tokens"]
    pos = sorted([res["name_position"], *res["position_shares"]])
    vals = [res["name_path_share"] if p == res["name_position"] else res["position_shares"][p] for p in pos]
    colors = ["#C44E52" if p == res["name_position"] else "#4C72B0" for p in pos]
    ax.bar(range(len(pos)), vals, color=colors)
    ax.bar([pos.index(res["name_position"])], [res["direct_name_share"]], color="none", hatch="//",
           edgecolor="0.15", lw=0, label="read directly at the answer position")
    ax.axhline(0.5, color="0.3", ls="--", lw=1, label="check: > 0.5 for the name")
    ax.set_xticks(range(len(pos)))
    ax.set_xticklabels([repr(toks[p]) for p in pos], rotation=45, fontsize=8)
    ax.set(ylim=(0, 1.05), ylabel="share of head-seed attribution", title=f"{m}: {res['n_circuits']} circuits")
    ax.legend(fontsize=7)
fig.suptitle("Tokens the head seeds' paths reach (red: the name)")
plotting.savefig(fig, "accpp/06_gendered_pronoun_name_paths", profile=nb.profile)
pd.DataFrame({m: {k: r["paths"][k] for k in ("name_path_share", "name_path_margin", "direct_name_share", "n_circuits")}
              for m, r in results.items()}).T

# %% [markdown]
# ## 5. The claims' checks
# Each claim's pre-registered check (papers/accpp/claims.yaml) gives its verdict; with several models the
# values are the smallest (or, for the ratio's upper end, the largest) over models. Only the behaviour
# claim is asserted at `cpu` (see the claims' history for why the others are not).

# %%
accuracy = min(r["metrics"].accuracy for r in results.values())
config = dict(models=MODEL_LIST, n_behaviour={m: len(r["prompts"]) for m, r in results.items()},
              n_traced=N_TRACE, n_acc=N_ACC, variant=next(iter(results.values()))["circuits"][0].meta["variant"],
              templates=list(pr.TEMPLATES))
measurements = [
    pr.measure_behaviour({m: r["metrics"] for m, r in results.items()}, config=config),
    pr.measure_size_ratio({m: r["sizes"] for m, r in results.items()}, accuracy, config=config),
    pr.measure_name_paths({m: r["paths"] for m, r in results.items()}, accuracy,
                          tokens={m: r["tokens"] for m, r in results.items()}, config=config),
]
assert [m.claim for m in measurements] == ["accpp/pronoun-behaviour", "accpp/pronoun-smaller-than-acc",
                                          "accpp/pronoun-name-paths"]
# every claim is recorded first; a failed asserted check stops the run afterwards
verdicts = claims.conclude_all(measurements, profile=nb.profile, seed=nb.seed)
for v in verdicts:
    print(v)
