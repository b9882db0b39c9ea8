"""Bitstream cache, download and installation (spec 1.3).

Cache layout: ``$VTA_CACHE_PATH`` (default ``~/.vta_cache``) / ``<TARGET>`` / ``<HW_VER with '.'
replaced by '_'>`` / ``<BITSTREAM>.bit`` (``.rbf`` for the DE10-Nano, the raw binary its FPGA
manager takes: the config's ``bitstream_ext``). Bitstreams of the original HLS design do not work with
this hardware (different register map), so there is no default download location: set
``VTA_BITSTREAM_URL`` (or pass ``url=``) to a server laid out like the cache, or build one with
``nox -s bitstream`` and install it with ``vta-bitstream install``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

from vta_hw.spec import Config, ConfigError, load_config

CACHE_ENV_VAR = "VTA_CACHE_PATH"
URL_ENV_VAR = "VTA_BITSTREAM_URL"
DOWNLOAD_TIMEOUT_S = 30


class BitstreamError(RuntimeError):
    """A bitstream that cannot be found, fetched or installed; the message says what to do."""


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV_VAR) or Path.home() / ".vta_cache").expanduser()


def bitstream_dir(cfg: Config | None = None) -> Path:
    cfg = load_config(cfg)
    return cache_dir() / cfg.TARGET / cfg.HW_VER.replace(".", "_")


def get_bitstream_path(cfg: Config | None = None) -> str:
    """Where the bitstream for ``cfg`` lives in the cache (it may not exist yet).

    Example:
        >>> vta.get_bitstream_path()
        '/home/me/.vta_cache/sim/0_0_2/1x16_i8w8a32_15_15_18_17.bit'
    """
    cfg = load_config(cfg)
    return str(bitstream_dir(cfg) / f"{cfg.BITSTREAM}{cfg.bitstream_ext}")


def _relative_url(cfg: Config) -> str:
    return f"{cfg.TARGET}/{cfg.HW_VER}/{cfg.BITSTREAM}{cfg.bitstream_ext}"


def download_bitstream(cfg: Config | None = None, url: str | None = None, *,
                       timeout: float = DOWNLOAD_TIMEOUT_S) -> str:
    """Fetch ``<url>/<TARGET>/<HW_VER>/<BITSTREAM>.bit`` (or ``.rbf``) into the cache and return its path.

    ``url`` defaults to ``$VTA_BITSTREAM_URL``; there is no default server (the original VTA's
    bitstreams do not work with this hardware).

    Raises:
        BitstreamError: no URL is configured, the server answers with an HTTP error, or the network
            cannot be reached; the message names the URL and what to do instead.

    Example:
        >>> path = vta.download_bitstream(url="http://bitstreams.example/vta")
    """
    cfg = load_config(cfg)
    base = url or os.environ.get(URL_ENV_VAR)
    if not base:
        raise BitstreamError(
            f"no bitstream download location is configured for {cfg.MODEL}: set ${URL_ENV_VAR} to a server laid out "
            f"as <TARGET>/<HW_VER>/<BITSTREAM>.bit, or build one with `nox -s bitstream` and install it with "
            f"`vta-bitstream install <file.bit>`")
    src = base.rstrip("/") + "/" + _relative_url(cfg)
    dest = Path(get_bitstream_path(cfg))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(dest.suffix + ".part")
    try:
        with urllib.request.urlopen(src, timeout=timeout) as resp, open(tmp, "wb") as out:
            shutil.copyfileobj(resp, out)
    except urllib.error.HTTPError as exc:
        tmp.unlink(missing_ok=True)
        raise BitstreamError(f"downloading {src} failed: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        tmp.unlink(missing_ok=True)
        reason = getattr(exc, "reason", exc)
        raise BitstreamError(f"cannot download {src}: {reason} (offline? install a local bitstream with "
                             "`vta-bitstream install <file.bit>`)") from None
    tmp.replace(dest)
    return str(dest)


def install_bitstream(path: str | os.PathLike[str], cfg: Config | None = None) -> str:
    """Copy a locally built bitstream into the cache for ``cfg``; returns the cached path.

    A ``plan.json`` beside the bitstream (written by ``nox -s bitstream``) is checked: a bitstream
    built for another configuration is refused.

    Raises:
        BitstreamError: the file does not exist, or its ``plan.json`` names another configuration
            (the message lists the keys that differ).

    Example:
        >>> vta.install_bitstream("build/pynq-z2/1x16_i8w8a32_15_15_18_17/1x16_i8w8a32_15_15_18_17.bit")
    """
    cfg = load_config(cfg)
    src = Path(path)
    if not src.is_file():
        raise BitstreamError(f"no bitstream at {src}")
    if src.suffix != cfg.bitstream_ext:
        raise BitstreamError(f"{src} is not a {cfg.bitstream_ext} file, which is what TARGET {cfg.TARGET} loads "
                             f"(`nox -s bitstream` says how to make one)")
    plan = src.parent / "plan.json"
    if plan.is_file():
        built = json.loads(plan.read_text()).get("config", {})
        if built and built != cfg.cfg_dict:
            diff = sorted(k for k in set(built) | set(cfg.cfg_dict) if built.get(k) != cfg.cfg_dict.get(k))
            raise BitstreamError(f"{src} was built for a different configuration (differs in {', '.join(diff)}); "
                                 f"it does not match {cfg.MODEL}")
    dest = Path(get_bitstream_path(cfg))
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    return str(dest)


def file_digest(path: str | os.PathLike[str]) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    """``vta-bitstream path|download|install``."""
    p = argparse.ArgumentParser(prog="vta-bitstream", description="Find, download or install VTA bitstreams.")
    p.add_argument("--use-cfg", metavar="PATH", help="configuration (default: $VTA_CONFIG or the repository's)")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("path", help="print where the bitstream for the configuration lives")
    d = sub.add_parser("download", help=f"download into the cache from --url or ${URL_ENV_VAR}")
    d.add_argument("--url")
    i = sub.add_parser("install", help="copy a locally built bitstream into the cache")
    i.add_argument("bitstream")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.use_cfg)
        if args.cmd == "path":
            print(get_bitstream_path(cfg))
        elif args.cmd == "download":
            print(download_bitstream(cfg, args.url))
        else:
            print(install_bitstream(args.bitstream, cfg))
    except (ConfigError, BitstreamError) as exc:
        print(f"vta-bitstream: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
