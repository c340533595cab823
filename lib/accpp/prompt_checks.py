"""Two inputs that trace silently wrong, found before tracing (warnings, and refusals in ``compendium trace``).

    problems = prompt_problems(tokenizer, ids, correct_id)   # [] when neither applies

1. A prompt ending in whitespace. The tokenizers of the offline models attach a word's leading space
   to the word (" Mary" is one token), so after "... gave a drink to " the model expects a token
   without a leading space: for SmolLM2 a digit, and p(" Mary") = 0.005 there. Traced as if it were
   an IOI prompt, the circuit explains a continuation the model does not make.
2. An answer token without its leading space where the prompt implies one: the prompt ends in a
   word, so the next word's token carries its space; "Mary" (a different token from " Mary") is the
   continuation of a word, not the next word.

An answer given as several tokens is refused elsewhere (:func:`accpp.seeding.answer_ids`; a set of
ids only as :class:`accpp.seeding.TokenSet`, which is not checked here: Greater-Than's digits follow
the prompt without a space).
"""
from __future__ import annotations

__all__ = ["PromptWarning", "prompt_problems", "ends_in_whitespace", "answer_space_problem"]


class PromptWarning(UserWarning):
    """The prompt or its answer is probably not what the trace should explain (the message says why)."""


def _encode(tokenizer, text: str) -> list[int]:
    try:
        out = tokenizer(text, add_special_tokens=False)
    except TypeError:  # a minimal tokenizer without the keyword
        out = tokenizer(text)
    return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out.input_ids)


def _decode(tokenizer, ids) -> str:
    """The text of ``ids`` without special tokens (a tokenizer without ``skip_special_tokens``: all of it)."""
    ids = [int(i) for i in ids]
    try:
        return tokenizer.decode(ids, skip_special_tokens=True)
    except TypeError:
        return tokenizer.decode(ids)


def ends_in_whitespace(tokenizer, ids) -> str | None:
    """A message if the prompt's text (special tokens left out) ends in whitespace, else None."""
    text = _decode(tokenizer, ids)
    if not text or not text[-1].isspace():
        return None
    return (f"the prompt ends in whitespace ({text[-12:]!r}): the tokenizer puts a word's leading space into the "
            f"word's token, so the model's next token here is one without a space (often not a word at all), and "
            f"the circuit would explain a continuation the model does not make. Remove the trailing whitespace "
            f"and give the answer with its leading space (e.g. ' Mary').")


def answer_space_problem(tokenizer, ids, answer: int, what: str = "correct") -> str | None:
    """A message if the prompt ends in a non-space character, the answer token has no leading space, and
    the same word with a leading space is a single, different token (what the prompt implies)."""
    text = _decode(tokenizer, ids)
    if not text or text[-1].isspace():
        return None
    piece = _decode(tokenizer, [answer])
    if not piece or piece[0].isspace() or not piece.strip() or not piece[0].isalpha():
        return None
    spaced = _encode(tokenizer, " " + piece)
    if len(spaced) != 1 or spaced[0] == int(answer):
        return None
    return (f"the {what} answer {piece!r} (token {int(answer)}) has no leading space, but the prompt ends in "
            f"{text[-1]!r}, so the next word's token is the space-prefixed {' ' + piece!r} (token {spaced[0]}): "
            f"{piece!r} would continue the prompt's last word. Did you mean {' ' + piece!r}?")


def prompt_problems(tokenizer, ids, correct=None, wrong=None) -> list[str]:
    """The messages of :func:`ends_in_whitespace` and :func:`answer_space_problem` (for single-id answers)."""
    if tokenizer is None:
        return []
    out = [m for m in [ends_in_whitespace(tokenizer, ids)] if m]
    for what, tok in (("correct", correct), ("wrong", wrong)):
        if isinstance(tok, int) and not isinstance(tok, bool):
            m = answer_space_problem(tokenizer, ids, tok, what)
            if m:
                out.append(m)
    return out
