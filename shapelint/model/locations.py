"""Where a finding points: a line of code (``Source``), and for a config target the keys
that set the size it changes (``ConfigLocation``) and whether that config is a
pretrained checkpoint's (``Pretrained``).

``shapelint.locate`` writes these on a finding; the reporters show them and ``--fix``
edits the keys they name. They are typed fields, not string-keyed facts, so that no
stage reads a key another stage wrote. ``details()`` gives each its JSON ``details``
keys (``config_key``, ``config_keys``, ``library_source``, ``pretrained``...), a public
contract (``docs/json.md``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """A line of a file: where user code ran an op, built a layer, or sets a size;
    ``column`` (1-based) where the size itself is known to start there (the keyword
    ``vocab_size=50257`` of a call: ``shapelint.locate.code_sites``)."""

    file: str
    line: int
    column: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, **({"column": self.column} if self.column else {})}

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" + (f":{self.column}" if self.column else "")


@dataclass(frozen=True)
class ConfigKey:
    """A key of a config file (``text_config.hidden_size``), its line and its value."""

    key: str
    line: int
    value: int

    def to_json(self, with_value: bool = True) -> dict[str, object]:
        return {"key": self.key, "line": self.line, **({"value": self.value} if with_value else {})}


@dataclass(frozen=True)
class ConfigLocation:
    """How a config sets the size a finding changes (``shapelint.locate.config_keys``).

    ``key`` is the key to edit (None: no key gives the size, and ``note`` says why);
    ``keys`` the keys the size is computed from, ``formula`` how (``vocab_size``,
    ``hidden_size / num_attention_heads``, ``intermediate_size / tp 8``); ``also`` keys
    of the same value that rank as high (an ambiguity, named); ``together`` keys edited
    to the same new value (one vocabulary declared twice). ``code_parameter`` is the
    layer's constructor parameter the suggestion named before it was moved to the key
    (set when the key holds the size itself), and ``library_source`` the library line
    the finding was reported at before (installed code the user does not edit)."""

    key: str | None
    formula: str = ""
    keys: tuple[ConfigKey, ...] = ()
    also: tuple[ConfigKey, ...] = ()
    together: tuple[ConfigKey, ...] = ()
    note: str = ""
    code_parameter: str | None = None
    library_source: Source | None = None

    def details(self) -> dict[str, object]:
        """The JSON ``details`` keys, in the order the report has always written them."""
        out: dict[str, object] = {}
        if self.key is None:
            out.update(config_key=None, config_note=self.note)
        else:
            if self.code_parameter is not None:
                out["code_parameter"] = self.code_parameter
            out.update(config_key=self.key, config_keys=[k.to_json() for k in self.keys],
                       config_formula=self.formula)
            if self.also:
                out["config_also"] = [k.to_json(with_value=False) for k in self.also]
            if self.together:
                out["config_together"] = [k.to_json() for k in self.together]
        if self.library_source is not None:
            out["library_source"] = self.library_source.to_json()
        return out


@dataclass(frozen=True)
class Pretrained:
    """The config is a pretrained checkpoint's (``why``: weights beside it, a
    ``_name_or_path``), so its sizes are the ones the weights were trained at and must
    not be edited; ``recipe``, for a vocabulary, says how to pad it in code instead
    (``shapelint.locate.pretrained``)."""

    why: str
    recipe: str = ""

    def details(self) -> dict[str, object]:
        return {"pretrained": self.why, **({"pretrained_fix": self.recipe} if self.recipe else {})}


__all__ = ["ConfigKey", "ConfigLocation", "Pretrained", "Source"]
