"""A curated catalogue of framework container images, each pinned to a version and citing where it comes from.

A rental's `image` may be a catalogue key (`pytorch`, `pytorch:2.5.1`, `vllm`, ...) or any image reference; a
key resolves to its pinned reference, anything else passes through unchanged. A catalogue framework with a
version the catalogue does not list (`pytorch:0.0.1`) is refused (`check_image`), not passed to a registry as
the Docker Hub image `library/pytorch`. Tags were checked against the publishers' registries and release notes
when written; bump them here, never in callers. The server checks a rental's image against this catalogue and
the agent resolves it, so both read the same table.
"""

from __future__ import annotations

from dataclasses import dataclass

from suanli.domain.errors import CatalogError

DEFAULT_IMAGE = "pytorch"  # what a container agent runs a rental that names no image in: the newest PyTorch
# the label the leader gives every node whose agent may run images (all but those whose agent said it runs
# host processes only), and that a rental naming an image requires
RUNS_IMAGES_LABEL = "suanli.io/runs-images"


@dataclass(frozen=True, slots=True)
class FrameworkImage:
    framework: str
    version: str
    reference: str  # registry/repository:tag
    source: str  # where the tag is published


FRAMEWORK_IMAGES: tuple[FrameworkImage, ...] = (
    FrameworkImage(
        "pytorch",
        "2.5.1",
        "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
        "Docker Hub, pytorch/pytorch (official PyTorch images), tag list",
    ),
    FrameworkImage(
        "pytorch",
        "2.4.1",
        "pytorch/pytorch:2.4.1-cuda12.4-cudnn9-runtime",
        "Docker Hub, pytorch/pytorch (official PyTorch images), tag list",
    ),
    FrameworkImage(
        "pytorch-ngc",
        "24.10",
        "nvcr.io/nvidia/pytorch:24.10-py3",
        "NVIDIA NGC catalog, PyTorch container; PyTorch Release Notes, release 24.10",
    ),
    FrameworkImage(
        "tensorflow",
        "2.17.0",
        "tensorflow/tensorflow:2.17.0-gpu",
        "Docker Hub, tensorflow/tensorflow (official TensorFlow images); tensorflow.org/install/docker",
    ),
    FrameworkImage(
        "jax",
        "24.04",
        "nvcr.io/nvidia/jax:24.04-py3",
        "NVIDIA NGC catalog, JAX container; JAX Release Notes, release 24.04",
    ),
    FrameworkImage(
        "vllm",
        "0.6.3",
        "vllm/vllm-openai:v0.6.3",
        "Docker Hub, vllm/vllm-openai (vLLM project's OpenAI-compatible server); docs.vllm.ai, Using Docker",
    ),
)


def resolve_image(name: str) -> str:
    """The image reference for a catalogue key (`framework` = newest listed, or `framework:version`)."""
    framework, _, version = name.partition(":")
    for image in FRAMEWORK_IMAGES:  # listed newest first per framework
        if image.framework == framework and version in ("", image.version):
            return image.reference
    return name


def versions(framework: str) -> tuple[str, ...]:
    """The versions the catalogue lists for `framework`, newest first (empty: not a catalogue framework)."""
    return tuple(image.version for image in FRAMEWORK_IMAGES if image.framework == framework)


def check_image(name: str) -> None:
    """CatalogError when `name` is a catalogue framework with a version the catalogue does not list."""
    framework, tagged, version = name.partition(":")
    known = versions(framework)
    if tagged and known and version not in known:
        raise CatalogError(
            f"the image catalogue has no {framework} {version}; its versions: {', '.join(known)} "
            f"(`{framework}` alone is {known[0]}); name an image outside the catalogue by its repository, "
            "e.g. registry.example.com/team/trainer:1.2"
        )
