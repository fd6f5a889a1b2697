"""Build the operator's image locally and import it into a node's image store.

The image is busybox, the Python interpreter that runs nodeagent (its binary, libraries and standard
library), kopf and the kubernetes client with their requirements from the same environment, and
website_operator.py at /app. Run it with nodeagent's venv:
`sudo .venv/bin/python examples/website-operator/build_image.py [--state-dir DIR]`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from nodeagent.testing.images import Entry, ImageSpec, build
from nodeagent.testing.python_image import python_spec

HERE = Path(__file__).resolve().parent
IMAGE, TAG = "localhost/website-operator", "v1"


def image_spec() -> ImageSpec:
    app = (Entry("app", kind="dir", mode=0o755),
           Entry("app/website_operator.py", data=(HERE / "website_operator.py").read_bytes()))
    return python_spec(IMAGE, TAG, distributions=("kopf", "kubernetes"), app=app,
                       cmd=("python3", "-m", "kopf", "run", "--all-namespaces", "/app/website_operator.py"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state-dir", help="the image store to import into (default: the node's)")
    ap.add_argument("--out", help="keep the built image (OCI layout and docker archive) here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        built = build(image_spec(), Path(args.out or tmp))
        cmd = [sys.executable, "-m", "nodeagent", "image"]
        if args.state_dir:
            cmd += ["--state-dir", args.state_dir]
        subprocess.run([*cmd, "import", "--no-progress", str(built.docker_archive)], check=True)
    print(f"{IMAGE}:{TAG} imported")
    return 0


if __name__ == "__main__":
    sys.exit(main())
