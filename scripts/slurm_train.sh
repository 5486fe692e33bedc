#!/usr/bin/env bash
# The trainer on TRAIN_NODES machines and vLLM servers on SERVE_NODES others, in one SLURM job:
#   sbatch --nodes=3 --ntasks-per-node=1 --exclusive scripts/slurm_train.sh MODEL CONFIG [OVERRIDE ...]
#   e.g. MODEL=/shared/models/qwen2.5-1.5b, CONFIG=configs/train/first_responder_gpu_vllm.yaml
# Environment (defaults in brackets):
#   SERVE_NODES [1]      machines that run `rubric-grpo serve MODEL` (the last ones of the allocation);
#                        0: no servers, the config's own backend samples (local, or vllm_colocate)
#   GPUS_PER_NODE [8]    trainer processes per machine (one per GPU)
#   TRANSFER [shared_filesystem]   how each step's full weights reach the servers (rollout.transfer.path):
#                        shared_filesystem: files in WEIGHTS_DIR; nccl: vLLM's NCCL transfer engine, from the
#                        first trainer machine (port TRANSFER_PORT [29700], which the servers must reach)
#   WEIGHTS_DIR          a folder on a filesystem every machine mounts, where each step's weights are written
#                        for the servers to read (rollout.weights_dir); required when SERVE_NODES > 0 and
#                        TRANSFER is shared_filesystem
#   ACCELERATE_CONFIG [configs/accelerate/multi_node.yaml]   or multi_node_deepspeed_zero2.yaml
#   MAIN_PORT [29500]    the trainer's rendezvous port on its first machine
#   SERVE_PORT [8000]    the servers' port
#   DRY_RUN [0]          1: print the commands instead of running them (tests/test_slurm_script.py)
# The run folder (logging.output_dir) must be on the shared filesystem too: checkpoints are written by every
# machine and resumed from any. The servers bind 0.0.0.0: their control routes replace the model's weights,
# so the cluster's network must be trusted (docs/training.md, Several machines).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: scripts/slurm_train.sh MODEL CONFIG [OVERRIDE ...]" >&2; exit 2; }
model=$1 config=$2
shift 2

if [ -n "${NODES:-}" ]; then read -r -a nodes <<< "$NODES"  # a test's node list, in place of SLURM's
else mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST"); fi
serve_nodes=${SERVE_NODES:-1}
train_nodes=$(( ${#nodes[@]} - serve_nodes ))
[ "$train_nodes" -ge 1 ] || { echo "slurm_train.sh: ${#nodes[@]} node(s) leave none for the trainer" >&2; exit 2; }
gpus=${GPUS_PER_NODE:-8}
main_port=${MAIN_PORT:-29500}
serve_port=${SERVE_PORT:-8000}
accelerate_config=${ACCELERATE_CONFIG:-configs/accelerate/multi_node.yaml}
trainers=("${nodes[@]:0:train_nodes}")
servers=("${nodes[@]:train_nodes}")

dry_run() { [ "${DRY_RUN:-0}" = 1 ]; }

overrides=("$@")
transfer=${TRANSFER:-shared_filesystem}
case "$transfer" in
    shared_filesystem) serve_transfer=() ;;
    nccl) serve_transfer=(--weight-transfer nccl) ;;
    *) echo "slurm_train.sh: TRANSFER must be shared_filesystem or nccl, not '$transfer'" >&2; exit 2 ;;
esac
if [ "$serve_nodes" -gt 0 ]; then
    if [ "$transfer" = shared_filesystem ] && [ -z "${WEIGHTS_DIR:-}" ]; then
        echo "slurm_train.sh: set WEIGHTS_DIR to a folder every node mounts (or TRANSFER=nccl)" >&2; exit 2
    fi
    urls=()
    for host in "${servers[@]}"; do
        serve=(srun --nodes=1 --ntasks=1 -w "$host" .venv/bin/rubric-grpo serve "$model" --host 0.0.0.0
               --port "$serve_port" "${serve_transfer[@]}")
        # a dry run prints each line whole, in order (two background printers could interleave theirs)
        if dry_run; then echo "$(printf '%q ' "${serve[@]}")"; else "${serve[@]}" & fi
        urls+=("http://$host:$serve_port/v1")
    done
    if ! dry_run; then
        for url in "${urls[@]}"; do  # the trainer starts once every server answers
            until curl -sf "${url%/v1}/health" > /dev/null; do sleep 5; done
        done
    fi
    joined=$(IFS=,; echo "${urls[*]}")
    if [ "$transfer" = nccl ]; then
        sent=("rollout.transfer.path=nccl" "rollout.transfer.address=${trainers[0]}"
              "rollout.transfer.port=${TRANSFER_PORT:-29700}")
    else
        sent=("rollout.weights_dir=$WEIGHTS_DIR")
    fi
    overrides=("rollout.backend=vllm" "rollout.vllm_urls=[$joined]" "${sent[@]}" "$@")
fi

# one task a machine; each starts the machine's GPUS_PER_NODE processes, its machine rank SLURM_PROCID (read
# by the task's own shell, hence the quoting: every other word is quoted here, once)
trainer_list=$(IFS=,; echo "${trainers[*]}")
quoted() { printf '%q ' "$@"; }
launch="$(quoted .venv/bin/accelerate launch --config_file "$accelerate_config" --num_machines "$train_nodes" \
    --num_processes "$(( train_nodes * gpus ))")--machine_rank \"\$SLURM_PROCID\" $(quoted \
    --main_process_ip "${trainers[0]}" --main_process_port "$main_port" \
    -m train "$config" "model.name_or_path=$model" "${overrides[@]}")"
if dry_run; then
    echo "srun --nodes=$train_nodes --ntasks-per-node=1 -w $trainer_list bash -c $launch"
else
    srun --nodes="$train_nodes" --ntasks-per-node=1 -w "$trainer_list" bash -c "$launch"
fi
