#!/usr/bin/env python3
"""Fetches the outside baselines of issue 5's side-by-side ("the numbers hold when re-measured
side by side with FlashInfer and the Triton kernel in one run") into the git-ignored
`.baselines/`, for the device machine, which reaches nothing outside (carry [".baselines"]).

What it takes, pinned by version and sha256 (PyPI):
- mamba-ssm 2.3.2.post1 (sdist): only its Triton kernels' Python files
  (`mamba_ssm/ops/triton/*.py`, `mamba_ssm/utils/*.py`). The package's own `__init__.py`
  files are not taken (the root one imports the compiled CUDA extensions, which are not
  built here): empty ones stand in, so that `mamba_ssm.ops.triton.selective_state_update`
  and `mamba_ssm.ops.triton.ssd_combined` import with torch and triton alone.
- einops 0.8.2 (wheel), which those files import.
- flashinfer-python 0.7.4 (wheel, 101 MB): only the headers of its Mamba state update
  (`flashinfer/data/include/flashinfer/mamba/*` and the three headers they include:
  `utils.cuh`, `vec_dtypes.cuh`, `exception.h`), into `.baselines/flashinfer/include`.
  `tools/flashinfer_ssu/ssu_bench.cu` (duet's harness) includes them and calls
  `invokeSelectiveStateUpdate`; nvcc builds it (`tools/flashinfer_ssu/build.sh`).

None of it becomes duet's code: `tools/triton_side_by_side.py` only calls it to time it.

    python3 tools/fetch_baselines.py            # here, once (network)
    python3 tools/triton_side_by_side.py ...    # there (scripts/device-session.sh step `triton`)
"""
import hashlib
import io
import os
import shutil
import sys
import tarfile
import urllib.request
import zipfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".baselines")
FILES = [
    ("mamba_ssm-2.3.2.post1.tar.gz",
     "https://files.pythonhosted.org/packages/af/48/aa7bec0efc7453fa0512276c0069c854bf684219050294266534bfef34bb/mamba_ssm-2.3.2.post1.tar.gz",
     "104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028"),
    ("einops-0.8.2-py3-none-any.whl",
     "https://files.pythonhosted.org/packages/2a/09/f8d8f8f31e4483c10a906437b4ce31bdf3d6d417b73fe33f1a8b59e34228/einops-0.8.2-py3-none-any.whl",
     "54058201ac7087911181bfec4af6091bb59380360f069276601256a76af08193"),
    ("flashinfer_python-0.7.4-py3-none-any.whl",
     "https://files.pythonhosted.org/packages/7e/22/c96155b9959c0fb37ce179c7b1053552c170ab875bbbfc75406c9024c36f/flashinfer_python-0.7.4-py3-none-any.whl",
     "a051a62e09a2738e8b0de47a1944fd2f0f3eff01b728b662141ea660cb09dd32"),
]
# The flashinfer wheel's headers taken: prefix in the wheel, then the files or folders below it.
FI_PREFIX = "flashinfer/data/include/"
FI_TAKE = ["flashinfer/utils.cuh", "flashinfer/vec_dtypes.cuh", "flashinfer/exception.h",
           "flashinfer/mamba/"]
# The sdist's files taken (below its top folder), as prefix and suffix.
TAKE = [("mamba_ssm/ops/triton/", ".py"), ("mamba_ssm/utils/", ".py")]
# Stand-in (empty) package files.
PACKAGES = ["mamba_ssm", "mamba_ssm/ops", "mamba_ssm/ops/triton", "mamba_ssm/utils"]


def fetch(name, url, sha):
    with urllib.request.urlopen(url, timeout=120) as r:
        data = r.read()
    got = hashlib.sha256(data).hexdigest()
    if got != sha:
        sys.exit(f"fetch_baselines: {name}: sha256 {got}, expected {sha}; not used")
    return data


def main():
    tmp = ROOT + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    sources = []
    for name, url, sha in FILES:
        data = fetch(name, url, sha)
        sources.append(f"{name} sha256 {sha} {url}")
        if name.endswith(".tar.gz"):
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
                for m in t.getmembers():
                    rel = m.name.split("/", 1)[1] if "/" in m.name else ""
                    if not m.isfile() or rel.endswith("__init__.py"):
                        continue
                    # Only the flat files of the folders taken (no subpackages).
                    if any(rel.startswith(p) and rel.endswith(s) and "/" not in rel[len(p):]
                           for p, s in TAKE):
                        dst = os.path.join(tmp, rel)
                        os.makedirs(os.path.dirname(dst), exist_ok=True)
                        with t.extractfile(m) as f, open(dst, "wb") as o:
                            o.write(f.read())
        else:
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                for n in z.namelist():
                    dst = None
                    if n.startswith("einops/"):
                        dst = os.path.join(tmp, n)
                    elif n.startswith(FI_PREFIX) and any(
                            n[len(FI_PREFIX):].startswith(f) for f in FI_TAKE):
                        dst = os.path.join(tmp, "flashinfer", "include", n[len(FI_PREFIX):])
                    if dst is not None and not n.endswith("/"):
                        os.makedirs(os.path.dirname(dst), exist_ok=True)
                        with open(dst, "wb") as o:
                            o.write(z.read(n))
    for p in PACKAGES:
        with open(os.path.join(tmp, p, "__init__.py"), "w") as o:
            o.write("# duet: an empty stand-in (tools/fetch_baselines.py)\n")
    with open(os.path.join(tmp, "SOURCES.txt"), "w") as o:
        o.write("\n".join(sources) + "\n")
    shutil.rmtree(ROOT, ignore_errors=True)
    os.rename(tmp, ROOT)
    n = sum(len(fs) for _, _, fs in os.walk(ROOT))
    print(f"fetch_baselines: {n} files in {os.path.normpath(ROOT)}")


if __name__ == "__main__":
    main()
