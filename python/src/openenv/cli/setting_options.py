"""Command-line options made from settings fields: one row per option, the rest from the field.

An option that sets a field of :class:`~openenv.settings.ServerSettings` (or of the
:class:`~openenv.runtime.limits.Limits` and :class:`~openenv.settings.HttpSettings` it holds) is
a :class:`SettingOption`: the field it sets, its flag, and only what the command line says
differently (a unit, an environment variable). Its type (int, float, a flag, a choice of the
field's ``Literal``), its default, its ``--help`` text and the refusal of a bad value are taken
from the field, so the options and the settings cannot drift apart; :func:`settings_options`
declares them on a command and :func:`settings_from` builds the settings from their values.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import click

from openenv.runtime.limits import SettingError, field_default, field_doc
from openenv.settings import HttpSettings, Limits, ServerSettings

__all__ = ["SettingOption", "settings_from", "settings_options"]

_HOLDERS: dict[str, type[Any]] = {"limits": Limits, "http": HttpSettings, "": ServerSettings}


@dataclasses.dataclass(frozen=True)
class SettingOption:
    """One option setting ``field`` of ``holder`` (``"limits"``, ``"http"`` or ``""`` for
    :class:`ServerSettings` itself).

    ``flag``: the option (``--max-sessions``; ``aliases``: older names). ``scale``: the setting
    is the option's value times it (``--max-message-mb``: MiB), or divided by ``divisor``
    (``--inline-threshold-us``: 1e6, exact where 1e-6 is not), named in the help by ``unit``.
    ``env``: an environment variable read when the option is not given. ``zero_is_none``: 0
    means None (no deadline). ``note``: what the help adds about the option itself.
    ``click_type``/``metavar``/``show_default``: where the field's type says too little.
    """

    holder: str
    field: str
    flag: str
    aliases: tuple[str, ...] = ()
    scale: float = 1.0
    divisor: float = 1.0
    unit: str = ""
    env: str | None = None
    zero_is_none: bool = False
    note: str = ""
    click_type: Any = None
    metavar: str | None = None
    show_default: str | None = None

    @property
    def cls(self) -> type[Any]:
        return _HOLDERS[self.holder]

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    def _annotation(self) -> Any:
        hint = typing.get_type_hints(self.cls)[self.field]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
            return args[0]  # X | None: the option's type is X's
        return hint

    def _default(self) -> Any:
        value = field_default(self.cls, self.field)
        if value is None or (self.scale == 1.0 and self.divisor == 1.0) or isinstance(value, bool):
            return value
        return value / self.scale * self.divisor

    def option(self) -> Callable[[Any], Any]:
        """The ``click.option`` of this setting."""
        hint = self._annotation()
        kw: dict[str, Any] = {"help": self.help()}
        default = self._default()
        if hint is bool and default is None:  # a tri-state: --x/--no-x, unset by default
            decls: list[str] = [f"{self.flag}/--no-{self.flag.removeprefix('--')}", self.dest]
            kw.update(default=None)
        elif hint is bool:
            decls = [self.flag, *self.aliases, self.dest]
            kw.update(is_flag=True, default=default)
        else:
            decls = [self.flag, *self.aliases, self.dest]
            if self.click_type is not None:
                kw["type"] = self.click_type
            elif typing.get_origin(hint) is Literal:
                kw["type"] = click.Choice([str(a) for a in typing.get_args(hint)])
            elif hint in (int, float):
                kw["type"] = float if (self.scale, self.divisor) != (1.0, 1.0) else hint
            if self.env is not None:
                env, fallback = self.env, default

                def from_env() -> Any:
                    raw = os.environ.get(env)
                    return fallback if not raw else raw

                kw.update(default=from_env, show_default=self.show_default or f"${env}, else {default}")
            else:
                kw.update(default=default, show_default=self.show_default or True)
        if self.metavar:
            kw["metavar"] = self.metavar
        if self.show_default is not None:
            kw["show_default"] = self.show_default
        return click.option(*decls, **kw)

    def help(self) -> str:
        text = field_doc(self.cls, self.field).replace("``", "")
        extra = "; ".join(x for x in (self.unit, self.note, f"also ${self.env}" if self.env else "") if x)
        return text + (f" This option: {extra}." if extra else "")

    def value(self, given: Any) -> Any:
        """The setting's value for the option's ``given`` value."""
        if given is None:
            return None
        if self.zero_is_none and not given:
            return None
        if (self.scale, self.divisor) != (1.0, 1.0) and not isinstance(given, bool):
            scaled = float(given) * self.scale / self.divisor
            return int(scaled) if isinstance(field_default(self.cls, self.field), int) else scaled
        return given


def settings_options(options: Sequence[SettingOption]) -> Callable[[Any], Any]:
    """A decorator declaring ``options`` on a click command, in their order."""

    def decorate(fn: Any) -> Any:
        for opt in reversed(options):
            fn = opt.option()(fn)
        return fn

    return decorate


def settings_from(options: Sequence[SettingOption], values: Mapping[str, Any], **fields: Any) -> ServerSettings:
    """The :class:`ServerSettings` of the options' ``values`` (keyed by their ``dest``) and
    ``fields`` (a holder's object, e.g. ``security=SecuritySettings(...)``, or a field of
    ServerSettings); a value a setting refuses is a usage error naming its option."""
    parts: dict[str, dict[str, Any]] = {"limits": {}, "http": {}, "": {}}
    flag_of = {opt.field: opt.flag for opt in options}
    for opt in options:
        parts[opt.holder][opt.field] = opt.value(values.get(opt.dest))
    try:
        return ServerSettings(
            limits=Limits(**parts["limits"]), http=HttpSettings(**parts["http"]), **parts[""], **fields
        )
    except SettingError as e:
        raise click.BadParameter(str(e), param_hint=flag_of.get(e.field, e.field)) from None
