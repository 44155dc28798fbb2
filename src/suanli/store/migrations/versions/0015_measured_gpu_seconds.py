"""rental_runs.measured_gpu_s: the GPU-seconds a run's measured energy covers (measured seconds x the GPUs the
rental held on that node at each beat), so that a measured average power per GPU stays exact when a rental
changes its GPU count

Existing rows get measured seconds x the GPUs per node of their rental's spec, which is what they held: GPU
counts could not change in place before this revision.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-30
"""

from __future__ import annotations

import json
import re

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

MIG_COMPUTE_SLICES = 7


def _per_node_gpus(spec: dict) -> float:
    """A spec's GPUs on one node, as `gpu_fraction` counts them at this revision."""
    if spec.get("share_milli") is not None:
        return spec["share_milli"] / 1000
    if spec.get("mig_profile") is not None:
        match = re.match(r"^(\d+)g\.", spec["mig_profile"])
        return (int(match.group(1)) if match else 1) / MIG_COMPUTE_SLICES
    return float(spec.get("gpus") or 0)


def upgrade() -> None:
    with op.batch_alter_table("rental_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("measured_gpu_s", sa.Float(), nullable=False, server_default="0"))
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT r.rental_id, r.node, r.measured_s, t.spec FROM rental_runs r "
            "JOIN rentals t ON t.id = r.rental_id WHERE r.measured_s > 0"
        )
    ).all()
    for rental_id, node, measured_s, spec in rows:
        found = json.loads(spec) if isinstance(spec, str) else spec
        bind.execute(
            sa.text(
                "UPDATE rental_runs SET measured_gpu_s = :gpu_s WHERE rental_id = :rental_id AND node = :node"
            ),
            {"gpu_s": measured_s * _per_node_gpus(found or {}), "rental_id": rental_id, "node": node},
        )


def downgrade() -> None:
    with op.batch_alter_table("rental_runs", schema=None) as batch_op:
        batch_op.drop_column("measured_gpu_s")
