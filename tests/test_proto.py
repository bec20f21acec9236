"""The committed generated code is exactly what the .proto files generate today."""

from __future__ import annotations

import filecmp
from pathlib import Path

from roleserve_core.proto import generate


def test_generated_code_matches_a_fresh_generation(tmp_path: Path) -> None:
    generated = generate.generate(tmp_path)
    expected = {
        proto.with_name(f"{proto.stem}{suffix}").relative_to(generate.REPOSITORY)
        for proto in generate.proto_files()
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
    }
    assert any(path.parts[0] == "plugins" for path in expected)  # plugins' protos too
    assert set(generated) == expected
    stale = [
        str(path)
        for path in generated
        if not filecmp.cmp(tmp_path / path, generate.REPOSITORY / path, shallow=False)
    ]
    assert stale == [], "regenerate: python -m roleserve_core.proto.generate"


def test_check_mode_reports_a_stale_file(tmp_path: Path, monkeypatch) -> None:
    fake_repository = tmp_path / "repo"
    (fake_repository / "roleserve_core" / "proto").mkdir(parents=True)
    for proto in generate.proto_files():
        (fake_repository / "roleserve_core" / "proto" / proto.name).write_bytes(proto.read_bytes())
    monkeypatch.setattr(generate, "REPOSITORY", fake_repository)
    monkeypatch.setattr(generate, "PROTO_DIR", fake_repository / "roleserve_core" / "proto")
    assert generate.main(["--check"]) == 1  # nothing generated there yet
    assert generate.main([]) == 0
    assert generate.main(["--check"]) == 0
