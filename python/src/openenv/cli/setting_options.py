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
from openenv.security import SecuritySettings, TlsConfig, TokenSet
from openenv.settings import HttpSettings, Limits, ServerSettings

__all__ = ["SECURITY_OPTIONS", "SettingOption", "security_from", "settings_from", "settings_options"]

_HOLDERS: dict[str, type[Any]] = {
    "limits": Limits,
    "http": HttpSettings,
    "security": SecuritySettings,
    "tls": TlsConfig,  # SecuritySettings.tls, given as its three files
    "": ServerSettings,
}


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
    ``name``: the parameter's name where it is not the flag's (``--token`` -> ``tokens``).
    ``multiple``: the option repeats (a list field). ``listed``: a list field given as one
    comma-separated value. ``envvar``: ``env`` is read by click itself (a flag:
    ``$OPENENV_ALLOW_ANONYMOUS=1``; a file that has no default).
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
    name: str | None = None
    multiple: bool = False
    listed: bool = False
    envvar: bool = False

    @property
    def cls(self) -> type[Any]:
        return _HOLDERS[self.holder]

    @property
    def dest(self) -> str:
        return self.name or self.flag.removeprefix("--").replace("-", "_")

    def _annotation(self) -> Any:
        hint = typing.get_type_hints(self.cls)[self.field]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
            return args[0]  # X | None: the option's type is X's
        return hint

    def _default(self) -> Any:
        value = field_default(self.cls, self.field)
        if value is dataclasses.MISSING or self.multiple or isinstance(self.click_type, click.Path):
            # a file (a TlsConfig's, the token file) or repeated tokens: none unless given
            return None
        if self.listed:
            return ",".join(value)
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
            if self.envvar:
                kw["envvar"] = self.env
        elif self.multiple:
            decls = [self.flag, *self.aliases, self.dest]
            kw.update(multiple=True)
        elif self.envvar:
            decls = [self.flag, *self.aliases, self.dest]
            kw.update(default=default, envvar=self.env, type=self.click_type)
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
        if self.listed:
            return tuple(v.strip() for v in given.split(",") if v.strip())
        if (self.scale, self.divisor) != (1.0, 1.0) and not isinstance(given, bool):
            scaled = float(given) * self.scale / self.divisor
            return int(scaled) if self._annotation() is int else scaled
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
        if opt.holder in parts:
            parts[opt.holder][opt.field] = opt.value(values.get(opt.dest))
    try:
        return ServerSettings(
            limits=Limits(**parts["limits"]), http=HttpSettings(**parts["http"]), **parts[""], **fields
        )
    except SettingError as e:
        raise click.BadParameter(str(e), param_hint=flag_of.get(e.field, e.field)) from None


#: The security options of ``openenv serve`` and ``openenv bridge`` (RFC 0003,
#: docs/security.md), made from :class:`SecuritySettings`' fields and, for ``tls``, from
#: :class:`TlsConfig`'s three files. ``tokens`` has two options (the tokens themselves and a
#: file of them; ``$OPENENV_TOKEN`` is read by :meth:`TokenSet.load`), joined by
#: :func:`security_from`.
SECURITY_OPTIONS: tuple[SettingOption, ...] = (
    SettingOption(
        "security",
        "tokens",
        "--token",
        name="tokens",
        multiple=True,
        note="repeatable; also $OPENENV_TOKEN (comma-separated)",
    ),
    SettingOption(
        "security",
        "tokens",
        "--token-file",
        name="token_file",
        note="a file of them, one per line",
        click_type=click.Path(dir_okay=False),
    ),
    SettingOption("security", "allow_anonymous", "--allow-anonymous", env="OPENENV_ALLOW_ANONYMOUS", envvar=True),
    SettingOption(
        "tls", "cert_file", "--tls-cert", env="OPENENV_TLS_CERT", envvar=True, click_type=click.Path(dir_okay=False)
    ),
    SettingOption(
        "tls", "key_file", "--tls-key", env="OPENENV_TLS_KEY", envvar=True, click_type=click.Path(dir_okay=False)
    ),
    SettingOption(
        "tls",
        "client_ca_file",
        "--tls-client-ca",
        env="OPENENV_TLS_CLIENT_CA",
        envvar=True,
        click_type=click.Path(dir_okay=False),
    ),
    SettingOption(
        "security",
        "allowed_origins",
        "--allowed-origins",
        listed=True,
        env="OPENENV_ALLOWED_ORIGINS",
        note="comma-separated",
        show_default="$OPENENV_ALLOWED_ORIGINS, else none",
    ),
    SettingOption(
        "security",
        "allowed_hosts",
        "--allowed-hosts",
        listed=True,
        env="OPENENV_ALLOWED_HOSTS",
        note="comma-separated",
        show_default="$OPENENV_ALLOWED_HOSTS, else none",
    ),
)


def security_from(values: Mapping[str, Any], *, allow_anonymous: bool = True) -> SecuritySettings:
    """The :class:`SecuritySettings` of :data:`SECURITY_OPTIONS`' ``values``: the tokens (given,
    from ``--token-file`` and ``$OPENENV_TOKEN``), the TLS files (checked: both or neither, readable,
    matching), the origins and hosts; a bad value is a usage error naming its option.
    ``allow_anonymous``: whether ``--allow-anonymous`` goes into the settings (the bridge passes
    it on its own)."""
    try:
        tokens = TokenSet.load(values.get("tokens") or (), values.get("token_file"))
    except (OSError, ValueError) as e:
        raise click.BadParameter(str(e), param_hint="--token/--token-file/$OPENENV_TOKEN") from None
    cert, key, client_ca = values.get("tls_cert"), values.get("tls_key"), values.get("tls_client_ca")
    if bool(cert) != bool(key):
        raise click.BadParameter("give both --tls-cert and --tls-key", param_hint="--tls-cert/--tls-key")
    if client_ca and not cert:
        raise click.BadParameter("mutual TLS needs --tls-cert and --tls-key", param_hint="--tls-client-ca")
    tls = None
    if cert and key:
        try:
            tls = TlsConfig(cert, key, client_ca).check()
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--tls-cert/--tls-key") from None
    fields: dict[str, Any] = {"tokens": tokens, "tls": tls}
    for opt in SECURITY_OPTIONS:
        if opt.listed or (opt.field == "allow_anonymous" and allow_anonymous):
            fields[opt.field] = opt.value(values.get(opt.dest))
    try:
        return SecuritySettings(**fields)
    except SettingError as e:
        flag = next((o.flag for o in SECURITY_OPTIONS if o.field == e.field), f"--{e.field.replace('_', '-')}")
        raise click.BadParameter(str(e), param_hint=flag) from None
