#!/usr/bin/env bash
# A model split by layers over MPI ranks (docs/design.md "Past one machine"), on loopback, one
# thread per rank:
#  - logits of the fixtures (dense tied with MTP, MoE with MTP, dense untied 4-bit) at forced
#    splits under -np 2 and -np 3, over shared memory and over TCP, byte for byte those of one
#    process (mpirun -np 1): a cut between a Gated DeltaNet layer and an attention layer, a rank
#    of a single layer (in the middle, at either end); prefill chunks and decode steps; and an
#    image prompt through `run` (MTP-drafted) under -np 2; bench's logits and batched generation
#    under -np 2 and 3, whole and in micro-batches (--pipeline-microbatches);
#  - MTP drafting with the head on the last rank (-np 2, and -np 3 where the last rank is not rank
#    0's neighbour): drafted == plain, and the drafts accepted by position are one process's;
#  - bad input is one line from the engine before any compute: more ranks than layers, a rank
#    over its memory budget, another checkpoint or another binary on one rank, a bad
#    --pipeline-microbatches, --spec mtp on a checkpoint without the head, a command that does not
#    run split;
#  - failure: one rank killed (SIGKILL) or stalled (SIGSTOP) mid-stream: every other exits within
#    10 s, the cause logged with the rank, and mpirun exits non-zero, also when killed under
#    orte_enable_recovery (where mpirun leaves the survivors running and ending them is ours).
# Usage: tests/dist/pipeline_test.sh build/qwen35
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(realpath "${1:-build/qwen35}")
# CI runs as root, which mpirun refuses unless told (Open MPI's own settings).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fx=tests/fixtures/models
tokens=1,5,9,100,200,3,7,8,11,500,12,13,70,71,72
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# logits NP BTL SPLIT MODEL OUT: the fixture's logits (prefill in chunks of 4, then 3 greedy
# decode steps, printed) under mpirun -np NP over the transports BTL.
logits() {
  local np=$1 btl=$2 split=$3 model=$4 out=$5
  shift 5
  local sp=()
  [ -n "$split" ] && sp=(--pipeline-split "$split")
  mpirun -np "$np" --mca btl "$btl" "$bin" logits -m "$model" --tokens "$tokens" --out "$out" -t 1 --chunk 4 \
    --greedy 3 "${sp[@]}" "$@" > "$out.txt" < /dev/null
}

# Bit-exact: every split against one process.
# The dense and MoE fixtures with MTP heads at every split below; the untied 4-bit head at one.
for f in dense_bf16_tied moe_bf16 dense_q4_untied; do
  m=$fx/$f/ckpt
  logits 1 self,vader "" "$m" "$tmp/$f.np1.npy"
  # The layers are 3 Gated DeltaNet, 1 attention, 3 Gated DeltaNet, 1 attention. -np 2 at 3 cuts
  # between a DeltaNet and an attention layer; at 7 the last rank holds one layer (and the head);
  # -np 3 at 3,4 leaves rank 1 the attention layer alone; at 1,7 ranks 0 and 2 hold one each.
  while read -r np btl split; do
    [ "$f" = dense_q4_untied ] && [ "$split" != 3,4 ] && continue
    out=$tmp/$f.np$np.${split//,/_}.$btl.npy
    if ! logits "$np" "$btl" "$split" "$m" "$out"; then fail "$f -np $np --pipeline-split $split ($btl) failed"; continue; fi
    cmp -s "$tmp/$f.np1.npy" "$out" || fail "$f -np $np --pipeline-split $split ($btl): logits differ from one process"
    cmp -s "$tmp/$f.np1.npy.txt" "$out.txt" || fail "$f -np $np --pipeline-split $split ($btl): greedy tokens differ"
  done <<'EOF'
2 self,vader 3
2 self,tcp 7
3 self,tcp 3,4
3 self,vader 1,7
EOF
done
echo "pipeline_test: logits bit-exact at every split ($SECONDS s)"

# An image prompt through `run`: the tower on rank 0, its rows' rotary positions down the pipe;
# split, the MTP head drafts too (its rows turn by the image's rope delta on the last rank).
vm=models/qwen35-tiny-kjv-vision
img=tests/fixtures/images/png_alpha_all.png
mpirun -np 1 "$bin" run -m "$vm" --image "$img" -p Describe -n 16 -t 1 --temperature 0 -q > "$tmp/img1.txt" < /dev/null
mpirun -np 2 --mca btl self,tcp "$bin" run -m "$vm" --image "$img" -p Describe -n 16 -t 1 --temperature 0 -q \
  --spec mtp > "$tmp/img2.txt" < /dev/null || fail "run --image --spec mtp under -np 2 failed"
[ -s "$tmp/img1.txt" ] && cmp -s "$tmp/img1.txt" "$tmp/img2.txt" ||
  fail "run --image --spec mtp: -np 2 differs from one process without drafts"
echo "pipeline_test: an image prompt under -np 2 (MTP-drafted) as in one process ($SECONDS s)"

# bench: its hash of the prompt's last logits, and of the tokens of generation through the
# engine's steps with three sequences batched (their 5-token prompts read in one step); split
# whole and in micro-batches (--pipeline-microbatches 2 with no least size: 2+1 sequences a step).
bench_hash() {
  local np=$1 btl=$2
  shift 2
  mpirun -np "$np" --mca btl "$btl" "$bin" bench -m "$fx/moe_bf16/ckpt" -p 16 -n 8 -d 4 -b 3 -r 1 -t 1 --json "$@" \
    < /dev/null | grep -o '"\(logits\|tg\)_hash": "[0-9a-f]*"' | tr '\n' ' '
}
h1=$(bench_hash 1 self,vader) || fail "bench under -np 1 failed"
while read -r np btl mb; do
  h=$(bench_hash "$np" "$btl" --pipeline-microbatches "$mb" --pipeline-microbatch-rows 1) ||
    fail "bench under -np $np (M=$mb) failed"
  [ -n "$h1" ] && [ "$h1" = "$h" ] || fail "bench: -np $np M=$mb's hashes ($h) are not one process's ($h1)"
done <<'EOF'
2 self,vader 1
2 self,vader 2
3 self,tcp 2
EOF
echo "pipeline_test: bench under -np 2 and 3, whole and in micro-batches, as in one process ($SECONDS s)"

# MTP drafting, the head and its cache on the last rank: bench --spec mtp decodes plain and drafted
# in one job and fails when their tokens differ; its counts (drafted, accepted, by position) must
# be one process's, which they are only with the same drafts. The bundled model's head is trained
# (the fixtures' random heads are never accepted: every commit would keep one row).
# spec_counts NP BTL [SPLIT]
spec_counts() {
  local sp=()
  [ -n "${3:-}" ] && sp=(--pipeline-split "$3")
  mpirun -np "$1" --mca btl "$2" "$bin" bench -m models/qwen35-tiny-kjv --spec mtp -p 16 -n 48 -t 1 --json \
    "${sp[@]}" < /dev/null | grep -o '"drafted.*"same_as_plain": [a-z]*'
}
c1=$(spec_counts 1 self,vader) || fail "bench --spec mtp under -np 1 failed"
c2=$(spec_counts 2 self,vader) || fail "bench --spec mtp under -np 2 failed"
c3=$(spec_counts 3 self,tcp 3,4) || fail "bench --spec mtp under -np 3 failed"
case "$c1" in *'"accepted": 0,'* | *'same_as_plain": false'* | '') fail "bench --spec mtp under -np 1: $c1" ;; esac
[ "$c2" = "$c1" ] || fail "bench --spec mtp: -np 2 gave $c2, one process $c1"
[ "$c3" = "$c1" ] || fail "bench --spec mtp: -np 3 gave $c3, one process $c1"
echo "pipeline_test: MTP drafting under -np 2 and 3 as in one process: $c1 ($SECONDS s)"

# On Vulkan devices (lavapipe; skipped, saying so, where the build or machine has none): each rank
# on its own device gives one process's logits on one device byte for byte (both ranks take
# lavapipe, device 0 being the only one: `vulkan` gives rank r device r mod their count); a CPU
# rank before a device rank (--device cpu,vulkan:0) runs, within 1e-3 of one CPU process.
lvp=$(ls /usr/share/vulkan/icd.d/lvp_icd*.json 2>/dev/null | head -1 || true)
if [ -n "$lvp" ] && VK_DRIVER_FILES=$lvp "$bin" devices 2>/dev/null | grep -q "^device 0:"; then
  export VK_DRIVER_FILES=$lvp VK_ICD_FILENAMES=$lvp
  m=$fx/dense_bf16_tied/ckpt
  logits 1 self,vader "" "$m" "$tmp/vk.np1.npy" --device vulkan || fail "-np 1 --device vulkan failed"
  logits 2 self,vader 3 "$m" "$tmp/vk.np2.npy" --device vulkan || fail "-np 2 --device vulkan failed"
  cmp -s "$tmp/vk.np1.npy" "$tmp/vk.np2.npy" || fail "-np 2 --device vulkan: logits differ from one process on one device"
  cmp -s "$tmp/vk.np1.npy.txt" "$tmp/vk.np2.npy.txt" || fail "-np 2 --device vulkan: greedy tokens differ"
  logits 2 self,vader 3 "$m" "$tmp/mixed.npy" --device cpu,vulkan:0 || fail "-np 2 --device cpu,vulkan:0 failed"
  logits 1 self,vader "" "$m" "$tmp/cpu.np1.npy"
  python3 - "$tmp/cpu.np1.npy" "$tmp/mixed.npy" <<'PY' || fail "--device cpu,vulkan:0: logits not within 1e-3 of one CPU process"
import struct, sys
def npy(path):  # float32 .npy as written by qwen35 logits
    b = open(path, "rb").read()
    n = struct.unpack("<H", b[8:10])[0]
    body = b[10 + n:]
    return struct.unpack("<%df" % (len(body) // 4), body)
a, b = npy(sys.argv[1]), npy(sys.argv[2])
sys.exit(0 if len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= 1e-3 else 1)
PY
  unset VK_DRIVER_FILES VK_ICD_FILENAMES
  echo "pipeline_test: one device per rank as one process on one device, and a CPU rank beside a device rank ($SECONDS s)"
else
  echo "pipeline_test: no Vulkan device (lavapipe): the per-rank device cases are skipped"
fi

# expect_line WHAT PATTERN -- mpirun args: the job fails, and the engine's stderr holds exactly one
# line of its own ("qwen35 ...") and it matches PATTERN.
expect_line() {
  local what=$1 pattern=$2
  shift 3
  if mpirun "$@" > "$tmp/out.txt" 2> "$tmp/err.txt" < /dev/null; then fail "$what: the job succeeded"; return; fi
  local ours
  ours=$(grep -c '^qwen35' "$tmp/err.txt" || true)
  [ "$ours" = 1 ] || { fail "$what: $ours lines from the engine"; cat "$tmp/err.txt" >&2; return; }
  grep -q "$pattern" "$tmp/err.txt" || { fail "$what: no '$pattern'"; cat "$tmp/err.txt" >&2; }
}
m=$fx/dense_bf16_tied/ckpt
common=(--tokens 1,2,3 --out "$tmp/bad.npy" -t 1)
expect_line "more ranks than layers" "9 ranks for a model of 8 layers" -- -np 9 "$bin" logits -m "$m" "${common[@]}"
expect_line "over the budget" "over the budget of 1.0 MiB" -- -np 2 "$bin" logits -m "$m" "${common[@]}" --rank-budget-mb 1
expect_line "another checkpoint" "rank 1's checkpoint differs from rank 0's" -- \
  -np 1 "$bin" logits -m "$m" "${common[@]}" : -np 1 "$bin" logits -m "$fx/moe_bf16/ckpt" "${common[@]}"
cp "$bin" "$tmp/qwen35-other"
printf 'x' >> "$tmp/qwen35-other"  # the same program, another file: as another build
expect_line "another binary" "rank 1 runs a different qwen35 binary" -- \
  -np 1 "$bin" logits -m "$m" "${common[@]}" : -np 1 "$tmp/qwen35-other" logits -m "$m" "${common[@]}"
expect_line "no micro-batches" "pipeline-microbatches must be in 1..256" -- -np 2 "$bin" logits -m "$m" "${common[@]}" \
  --pipeline-microbatches 0
expect_line "--spec mtp without a head" "this checkpoint has no MTP head" -- -np 2 "$bin" bench \
  -m "$fx/qwen3_dense_tied_bf16/ckpt" -p 8 -n 4 --spec mtp -t 1
expect_line "a command not split yet" "does not run split over MPI ranks" -- -np 2 "$bin" tokenize -m "$m" hi
[ ! -s "$tmp/bad.npy" ] || fail "a failed start wrote logits"
echo "pipeline_test: bad input is one line ($SECONDS s)"

# rank_pid MPIRUN_PID RANK: the pid of that rank (a child of mpirun, by its environment).
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then echo "$p"; return; fi
  done
}

# failure SIGNAL: -np 3; rank 0 waits 60 s between steps (the test hook), so the job is
# mid-stream when rank 1 gets SIGNAL; every rank must be gone within 10 s.
# More arguments go to mpirun: with --mca orte_enable_recovery 1 mpirun leaves the survivors to
# the heartbeat, and would exit 0 unless the rank ending the job tells it otherwise.
failure() {
  local sig=$1 log=$tmp/fail.$1${2:+.recovery}.txt
  local mca=("${@:2}")
  QWEN35_PIPELINE_TEST_DELAY=60 mpirun -np 3 "${mca[@]}" -x QWEN35_PIPELINE_TEST_DELAY "$bin" logits -m "$m" \
    --tokens "$tokens" --chunk 4 --out "$tmp/f.npy" -t 1 > "$log" 2>&1 < /dev/null &
  local job=$!
  # A state, not a time: the bound only keeps a broken start from hanging the test.
  for _ in $(seq 1200); do grep -qs "waits 60 s" "$log" && break; sleep 0.1; done
  grep -qs "waits 60 s" "$log" || { fail "SIG$sig: the job never reached its second step"; kill -9 "$job"; return; }
  local victim others=()
  victim=$(rank_pid "$job" 1)
  others=("$(rank_pid "$job" 0)" "$(rank_pid "$job" 2)")
  kill "-$sig" "$victim"
  local t0=$SECONDS alive=1
  while [ $((SECONDS - t0)) -le 10 ]; do
    alive=0
    for p in "${others[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.2
  done
  [ $alive = 0 ] || { fail "SIG$sig on rank 1: other ranks still alive after 10 s"; kill -9 "$job" "${others[@]}" 2>/dev/null; }
  kill -9 "$victim" 2>/dev/null || true
  wait "$job" 2>/dev/null && fail "SIG$sig on rank 1: mpirun exited 0"
  grep -qi "rank 1" "$log" || { fail "SIG$sig on rank 1: the log does not name rank 1"; cat "$log" >&2; }
}
failure KILL
failure STOP
failure KILL --mca orte_enable_recovery 1
grep -q "no heartbeat from rank 1" "$tmp/fail.KILL.recovery.txt" || { fail "SIGKILL under recovery: not the heartbeat's line"; cat "$tmp/fail.KILL.recovery.txt" >&2; }
grep -q "no heartbeat from rank 1" "$tmp/fail.STOP.txt" || { fail "SIGSTOP: not the heartbeat's line"; cat "$tmp/fail.STOP.txt" >&2; }
echo "pipeline_test: a killed or stalled rank ends the job within 10 s ($SECONDS s)"

[ $fails = 0 ] || { echo "pipeline_test: $fails failures" >&2; exit 1; }
echo "pipeline_test: all passed ($SECONDS s)"
