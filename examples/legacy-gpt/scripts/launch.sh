#!/usr/bin/env bash
# Multi-node launch on the A100 cluster (8 GPUs per node, InfiniBand).
# Usage: scripts/launch.sh <num_nodes> <node_rank> <master_addr> [train.py args...]
set -euo pipefail

NNODES=${1:-1}
NODE_RANK=${2:-0}
MASTER_ADDR=${3:-127.0.0.1}
shift 3 || true

export NCCL_IB_DISABLE=0
export NCCL_IB_HCA=mlx5
export NCCL_P2P_LEVEL=NVL
export NCCL_SOCKET_IFNAME=eth0
export NCCL_NET_GDR_LEVEL=2
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export CUDA_DEVICE_MAX_CONNECTIONS=1
export OMP_NUM_THREADS=8

IMAGE=${IMAGE:-legacy-gpt:latest}

docker run --rm --gpus all --ipc=host --network=host \
    --ulimit memlock=-1 --ulimit stack=67108864 \
    -e NCCL_IB_DISABLE -e NCCL_IB_HCA -e NCCL_P2P_LEVEL -e NCCL_SOCKET_IFNAME -e NCCL_NET_GDR_LEVEL \
    -e NCCL_DEBUG -e CUDA_DEVICE_MAX_CONNECTIONS -e OMP_NUM_THREADS \
    -v "$PWD":/workspace/legacy-gpt -v /data:/data \
    "$IMAGE" \
    torchrun --nnodes="$NNODES" --node_rank="$NODE_RANK" --nproc_per_node=8 \
        --master_addr="$MASTER_ADDR" --master_port=29500 \
        train.py "$@"
