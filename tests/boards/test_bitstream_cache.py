"""Bitstream cache layout, download from a configurable URL (served on loopback here), install."""

import http.server
import json
import socket
import threading
from pathlib import Path

import pytest

from vta_compiler import bitstream as B
from vta_hw.spec import load_config


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VTA_CACHE_PATH", str(tmp_path / "cache"))
    monkeypatch.delenv("VTA_BITSTREAM_URL", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "www"
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(root), **k)  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.RequestHandlerClass.log_message = lambda *a: None
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}/bitstreams"
    httpd.shutdown()


def test_cache_layout(cache):
    cfg = load_config({**load_config().cfg_dict, "TARGET": "pynq"})
    assert B.get_bitstream_path(cfg) == str(cache / "pynq" / "0_0_2" / "1x16_i8w8a32_15_15_18_17.bit")
    # the DE10-Nano's FPGA manager loads raw binary files; the ZCU104 a Vivado .bit
    assert B.get_bitstream_path(cfg.replace(TARGET="de10nano")) == \
        str(cache / "de10nano" / "0_0_2" / "1x16_i8w8a32_15_15_18_17.rbf")
    assert B.get_bitstream_path(cfg.replace(TARGET="zcu104")) == \
        str(cache / "zcu104" / "0_0_2" / "1x16_i8w8a32_15_15_18_17.bit")


def test_de10nano_install_and_download_use_rbf(cache, server, tmp_path):
    root, url = server
    cfg = load_config({**load_config().cfg_dict, "TARGET": "de10nano"})
    src = root / "bitstreams" / "de10nano" / "0.0.2" / f"{cfg.BITSTREAM}.rbf"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"\xff\xff rbf" * 50)
    assert Path(B.download_bitstream(cfg, url)).read_bytes() == src.read_bytes()
    bit = tmp_path / f"{cfg.BITSTREAM}.bit"
    bit.write_bytes(b"bits")
    with pytest.raises(B.BitstreamError, match=r"is not a \.rbf file, which is what TARGET de10nano loads"):
        B.install_bitstream(bit, cfg)
    rbf = bit.with_suffix(".rbf")
    rbf.write_bytes(b"raw")
    assert Path(B.install_bitstream(rbf, cfg)).read_bytes() == b"raw"


def test_download_from_configured_url(cache, server, monkeypatch):
    root, url = server
    cfg = load_config({**load_config().cfg_dict, "TARGET": "ultra96"})
    src = root / "bitstreams" / "ultra96" / "0.0.2" / f"{cfg.BITSTREAM}.bit"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"\x00\x09bitstream bytes" * 100)
    path = B.download_bitstream(cfg, url)
    assert Path(path).read_bytes() == src.read_bytes() and path == B.get_bitstream_path(cfg)
    monkeypatch.setenv("VTA_BITSTREAM_URL", url)
    Path(path).unlink()
    assert Path(B.download_bitstream(cfg)).read_bytes() == src.read_bytes()
    with pytest.raises(B.BitstreamError, match=r"downloading http://127.0.0.1:\d+/bitstreams/pynq/0.0.2/"
                                               r"1x16_i8w8a32_15_15_18_17.bit failed: HTTP 404"):
        B.download_bitstream(cfg.replace(TARGET="pynq"))


def test_download_errors_are_clear(cache):
    with pytest.raises(B.BitstreamError, match="no bitstream download location is configured .*`nox -s bitstream`"):
        B.download_bitstream(load_config())
    with socket.socket() as s:          # a port nobody listens on: "offline"
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(B.BitstreamError, match="cannot download http://127.0.0.1:.* install a local bitstream"):
        B.download_bitstream(load_config(), f"http://127.0.0.1:{port}", timeout=5)
    assert not list(cache.rglob("*.part"))


def test_install_checks_the_plan(cache, tmp_path, capsys):
    cfg = load_config({**load_config().cfg_dict, "TARGET": "pynq"})
    built = tmp_path / "build" / "pynq-z1" / cfg.BITSTREAM
    built.mkdir(parents=True)
    bit = built / f"{cfg.BITSTREAM}.bit"
    bit.write_bytes(b"bits")
    (built / "plan.json").write_text(json.dumps({"config": cfg.cfg_dict}))
    assert B.install_bitstream(bit, cfg) == B.get_bitstream_path(cfg)
    assert Path(B.get_bitstream_path(cfg)).read_bytes() == b"bits"
    other = cfg.replace(LOG_ACC_BUFF_SIZE=16)
    with pytest.raises(B.BitstreamError, match="built for a different configuration .differs in LOG_ACC_BUFF_SIZE"):
        B.install_bitstream(bit, other)
    with pytest.raises(B.BitstreamError, match="no bitstream at"):
        B.install_bitstream(tmp_path / "missing.bit", cfg)
    # the command line
    cfg_file = tmp_path / "cfg.json"
    cfg_file.write_text(cfg.to_json())
    assert B.main(["--use-cfg", str(cfg_file), "path"]) == 0
    assert capsys.readouterr().out.strip() == B.get_bitstream_path(cfg)
    assert B.main(["--use-cfg", str(cfg_file), "install", str(tmp_path / "missing.bit")]) == 2
    assert "no bitstream at" in capsys.readouterr().err
