#!/usr/bin/env bash
# Runs the benchmarks and rewrites their sections of docs/BENCHMARKS.md with
# the results, the machine, the date, the commit and the command that
# produced each table.
#
#   bash scripts/bench.sh                  # every section (about 6 hours;
#                                          # accuracy, long_run 2 hours each)
#   bash scripts/bench.sh memory accuracy  # only these; the others are kept
#   bash scripts/bench.sh --smoke          # seconds-long versions (CI), into
#                                          # a scratch file, not the docs
#   BENCH_OLD_BIN=/old/build/bin bash scripts/bench.sh compare
#                                          # this build's throughput beside
#                                          # another's, alternating runs
#   BENCH_OLD_BIN=/old/build/bin bash scripts/bench.sh main_job
#                                          # the main job by both builds
# Sections: throughput fleets hosts memory capped zoo accuracy long_run
# forward_gradient feed peer transformer transformer_recipe staleness
# threads partition probe transport precision
# (the default), compare, main_job and gpu (only when named; gpu needs a CUDA
# build and a GPU, and scripts/gpu/build.sh --bench runs it on a GPU host;
# gpu --smoke runs its commands on the CPU at toy sizes).
# Environment: BENCH_DEVICE (precision: the device, default cpu; cuda on a
# GPU host), BUILD_DIR (default build), PETRA_SKIP_BUILD=1 reuses a build,
# BENCH_DOC (default docs/BENCHMARKS.md), BENCH_OLD_BIN (compare, main_job: the other
# build's bin directory; BENCH_OLD_COMMIT names its commit in the doc),
# BENCH_COMMIT (the commit to name where the tree has no .git), PETRA_PYTHON
# (default /usr/bin/python3), BENCH_DEADLINE (a Unix time: each command gets
# only the time left, none starts after it; scripts/gpu/build.sh sets it).
# BENCH_GPU_TRAIN (the gpu section's training rows, e.g. "PETRA:2:fleet:fp32").
# A command that fails is marked in its section, the others still run, and
# the script then exits 1 naming what failed.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BIN=$BUILD_DIR/bin
# A GPU host's Python may live elsewhere (scripts/gpu/build.sh sets it).
PY=${PETRA_PYTHON:-/usr/bin/python3}
ALL=(throughput fleets hosts memory capped zoo accuracy long_run
     forward_gradient feed peer transformer transformer_recipe staleness
     threads partition probe transport precision)

smoke=0
sections=()
for arg in "$@"; do
  case "$arg" in
    --smoke) smoke=1 ;;
    --help|-h) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"
      exit 0 ;;
    throughput|fleets|hosts|memory|capped|zoo|accuracy|long_run|\
    forward_gradient|\
    feed|peer|\
    transformer|transformer_recipe|\
    staleness|threads|partition|probe|transport|precision|compare|main_job|\
    gpu)
      sections+=("$arg") ;;
    *) echo "bench.sh: unknown section or flag '$arg' (sections: ${ALL[*]})" >&2
       exit 2 ;;
  esac
done
((${#sections[@]})) || sections=("${ALL[@]}")
if ((smoke)); then
  DOC=${BENCH_DOC:-$(mktemp -t petra-bench-smoke-XXXXXX.md)}
else
  DOC=${BENCH_DOC:-docs/BENCHMARKS.md}
fi
if [[ "${PETRA_SKIP_BUILD:-0}" != 1 ]]; then bash scripts/build.sh; fi
RESULTS=$(mktemp -d -t petra-bench-XXXXXX)
trap 'rm -rf "$RESULTS"' EXIT

machine() {
  echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') at commit" \
    "${BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)} on" \
    "$(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | sed -n 1p))," \
    "$(free -g | awk '/Mem:/{print $2}') GiB."
}

# Prints "Command: `...`" (shell-quoted), runs the command (its stderr is
# progress) and prints its standard output, through grep -E "$RUN_FILTER"
# when that is set. A command that fails loses only itself: the section
# says so with the end of its stderr and goes on, and the script exits 1
# at the end naming it. With BENCH_DEADLINE (a Unix time) a command gets
# only the time left, and none starts once it has passed. After each
# command the section so far goes into the document, so a run stopped
# midway keeps what it measured.
run() {
  # Quoted as a shell would need it, so that the line can be pasted.
  local line rc=0 limit=()
  line=$($PY -c 'import shlex, sys; print(shlex.join(sys.argv[1:]))' "$@")
  echo "Command: \`$line\`"
  echo
  echo "bench: $line" >&2
  if [[ -n "${BENCH_DEADLINE:-}" ]]; then
    local left=$((BENCH_DEADLINE - $(date +%s)))
    if ((left < 5)); then
      echo "Not run: the time budget (BENCH_DEADLINE) was spent before it."
      echo "$SECTION: not run (time budget): $line" >> "$RESULTS/failed.txt"
      flush_section
      return 0
    fi
    limit=(timeout --kill-after=10 "$left")
  fi
  set +e
  "${limit[@]}" "$@" 2>&1 >"$RESULTS/out.txt" | tee "$RESULTS/err.txt" >&2
  rc=${PIPESTATUS[0]}
  set -e
  if [[ -n "${RUN_FILTER:-}" ]]; then
    grep -E "$RUN_FILTER" "$RESULTS/out.txt" || true
  else
    cat "$RESULTS/out.txt"
  fi
  if ((rc != 0)); then
    local why="exit $rc"
    if ((rc == 124 || rc == 137)) && ((${#limit[@]})); then
      why="stopped at the time budget"
    fi
    echo
    echo "**Failed** ($why); the end of its error output:"
    echo
    echo '```'
    tail -n 5 "$RESULTS/err.txt"
    echo '```'
    echo "$SECTION: failed ($why): $line" >> "$RESULTS/failed.txt"
  fi
  flush_section
}

# Writes the section's text so far into the document.
flush_section() {
  $PY bench/update_doc.py "$DOC" "$SECTION" < "$RESULTS/$SECTION.md"
}

section_throughput() {
  local args=(--stages 2,4 --width 1,0.25 --repeats 3 --micro-batches 30,200
              --simulate)
  if ((smoke)); then
    args=(--stages 2 --repeats 1 --micro-batches 4 --width 0.125
          --micro-batch 16 --simulate)
  fi
  echo "## Throughput: PETRA against reversible backprop (paper, Table 5)"
  echo
  machine
  echo
  run $PY bench/throughput.py --bin-dir "$BIN" "${args[@]}" \
    --json "$RESULTS/throughput.json"
}

section_fleets() {
  echo "## Predicted speed-ups of large fleets (simulator; paper, Table 5)"
  echo
  machine
  echo
  echo "The paper measured PETRA 3.0x faster than reversible backprop for"
  echo "RevNet18 on 10 GPUs and 2.4x for RevNet34 on 18 GPUs (CIFAR-10,"
  echo "micro-batch 256). First from FLOPs, with a V100-class device"
  echo "(15 TFLOP/s sustained) and 10 GB/s links; the \"petra\" row's"
  echo "speed-up is the prediction to set beside the paper's:"
  echo
  local archs=(revnet18 revnet34 revnet50) mb=1000
  if ((smoke)); then archs=(revnet18); mb=64; fi
  for arch in "${archs[@]}"; do
    run "$BIN/petra" simulate --arch "$arch" --variant cifar \
      --stages per-block --micro-batch 256 --schedule all \
      --device-flops-per-second 1.5e13 --link-bandwidth 1e10 \
      --link-latency 2e-5 --micro-batches "$mb"
    echo
  done
  echo "Then from each block's time measured on this machine's CPU (one"
  echo "core per stage), with the same links:"
  echo
  local width=1 batch=256 profile_archs=(revnet18 revnet34)
  if ((smoke)); then width=0.125; batch=8; profile_archs=(revnet18); fi
  for arch in "${profile_archs[@]}"; do
    run taskset -c 0 "$BIN/petra" profile --arch "$arch" --variant cifar \
      --dataset synthetic --width "$width" --stages per-block \
      --micro-batch "$batch" --threads 1 --warmup 1 --repeats 3 \
      --output "$RESULTS/profile-$arch.json"
    echo
    run "$BIN/petra" simulate --profile "$RESULTS/profile-$arch.json" \
      --schedule all --link-bandwidth 1e10 --link-latency 2e-5 \
      --micro-batches "$mb"
    echo
  done
}

section_hosts() {
  echo "## Sixty-four devices on eight hosts (simulator)"
  echo
  machine
  echo
  echo "A RevViT-B-sized transformer made 62 blocks deep (embed 768, 12 heads,"
  echo "MLP 3072, patch 16, 224x224: 64 per-block stages) on 8 hosts of 8"
  echo "devices, NVLink-class links inside a host (450 GB/s) and 50 GB/s"
  echo "across. First from FLOPs at 400 TFLOP/s sustained (an H100-class"
  echo "device in bf16), micro-batch 64:"
  echo
  local model=(--arch revvit --variant imagenet --embed-dim 768 --depth 62
               --heads 12 --mlp-ratio 4 --patch-size 16)
  local links=(--devices-per-host 8 --link-bandwidth 4.5e11
               --cross-host-bandwidth 5e10 --link-latency 5e-6)
  local mb=64 profile_mb=8 micro_batches=1000
  if ((smoke)); then
    model=(--arch revvit --variant mnist --embed-dim 32 --depth 14 --heads 2
           --mlp-ratio 2 --patch-size 7)
    links=(--devices-per-host 4 --link-bandwidth 4.5e11
           --cross-host-bandwidth 5e10 --link-latency 5e-6)
    mb=8; profile_mb=4; micro_batches=64
  fi
  run "$BIN/petra" simulate "${model[@]}" --stages per-block \
    --micro-batch "$mb" --device-flops-per-second 4e14 "${links[@]}" \
    --schedule all --micro-batches "$micro_batches"
  echo
  echo "Then from each block's times measured on this machine's CPU (no GPU"
  echo "profile yet: a CPU's blocks take about a thousand times a GPU's, so"
  echo "the links never bound this run; the schedules' order and the memory"
  echo "columns are what carry over), micro-batch $profile_mb:"
  echo
  run "$BIN/petra" profile "${model[@]}" --dataset synthetic \
    --stages per-block --micro-batch "$profile_mb" --threads "$(nproc)" \
    --warmup 1 --repeats 2 --output "$RESULTS/profile-hosts.json"
  echo
  run "$BIN/petra" simulate --profile "$RESULTS/profile-hosts.json" \
    "${links[@]}" --schedule all --micro-batches "$micro_batches"
}

section_capped() {
  echo "## The memory argument: one job under a per-device memory cap"
  echo
  machine
  echo
  local args=(--stages 10 --cap-mib 1300 --cap-mib 1700 --cap-mib 2400 --job
              "--arch revnet18 --width 1 --dataset synthetic --variant cifar --micro-batch 128 --train-limit 5120 --test-limit 128 --epochs 1 --seed 1")
  if ((smoke)); then
    args=(--stages 2 --cap-mib 2000 --job
          "--arch revnet18 --width 0.125 --dataset synthetic --variant cifar --micro-batch 16 --train-limit 256 --test-limit 32 --epochs 1 --seed 1")
  fi
  run $PY bench/capped_memory.py --bin-dir "$BIN" "${args[@]}" \
    --json "$RESULTS/capped.json"
  echo
  echo "A device is a process here, and its cap RLIMIT_DATA: the same"
  echo "allocations fail on a GPU at the caching allocator's fraction"
  echo "(model::LimitDeviceMemory). 1F1B-style stashing is the engine's"
  echo "delayed mode keeping every stage's inputs and the weights each forward"
  echo "used (PipeDream's buffers); backprop is plain autograd over the whole"
  echo "network in one process (petra_bench_backprop). Each stage server gets"
  echo "one core's share (2 cores here), so the fleet's samples/s is not"
  echo "faster than one process on this machine: the table says what fits."
  echo "RevNet18's three downsampling blocks are not reversible: under PETRA"
  echo "they keep their inputs too (stage 3 of 10: 13 micro-batches in"
  echo "flight), and that stage sets PETRA's need: at this size about what"
  echo "plain backprop needs on one device, while stashing needs more. Near a"
  echo "cap, whether a run fits can change between runs (threads' stacks,"
  echo "receive buffers and allocator arenas count against RLIMIT_DATA too)."
}

section_zoo() {
  echo "## The zoo at ImageNet size: parameter counts and a first epoch"
  echo
  machine
  echo
  local samples=16
  if ((smoke)); then samples=0; fi
  run $PY bench/zoo.py --bin-dir "$BIN" --train-samples "$samples"
}

section_memory() {
  echo "## Memory of the buffer configurations (paper, Table 3)"
  echo
  machine
  echo
  # arch:width. RevNet50 and i-RevNet18 at half width keep the section
  # within minutes on 2 cores (the four configurations train each network).
  local batch=64 runs=(revnet18:1 revnet50:0.5 irevnet18:0.5)
  if ((smoke)); then batch=4; runs=(revnet18:0.125 irevnet18:0.125); fi
  for r in "${runs[@]}"; do
    run "$BIN/petra_bench_memory" --arch "${r%%:*}" --variant cifar \
      --width "${r##*:}" --micro-batch "$batch"
    echo
  done
  echo "Peak bytes count parameters (with BatchNorm statistics), optimizer"
  echo "state (momentum and accumulated gradients), input buffers and weight"
  echo "stashes; \"without stage 0's data buffer\" leaves out the first stage's"
  echo "buffered data batch, as the paper's Table 3 does. CIFAR-size inputs"
  echo "(32x32), not ImageNet's 224x224, so that the four configurations train"
  echo "in minutes on this machine."
}

section_accuracy() {
  local args=(--e2e 100)
  # Every configuration, on the per-block stages only: the other stage
  # count is the same command with another --stages.
  if ((smoke)); then args=(--smoke --e2e 10 --stages per-block); fi
  echo "## Accuracy: PETRA against backprop and delayed gradients (paper, Tables 2 and 4, Figures 4 and 5)"
  echo
  machine
  echo
  run $PY bench/accuracy.py --petra "$BIN/petra" "${args[@]}" \
    --json "$RESULTS/accuracy.json"
}

section_long_run() {
  # Is the per-block gap of the 3-epoch runs the short schedule? 15 epochs
  # with the paper's recipe (warm-up, step decay) fitted to that length.
  local args=(--epochs 15 --stages per-block --only "backprop,PETRA k=1,PETRA k=4"
    --model-flags "--recipe paper" --e2e 200)
  if ((smoke)); then
    args=(--smoke --stages per-block --only "backprop,PETRA k=1"
      --model-flags "--recipe paper" --e2e 10)
  fi
  echo "## Accuracy: the per-block gap over a longer run (the paper's recipe)"
  echo
  machine
  echo
  run $PY bench/accuracy.py --petra "$BIN/petra" "${args[@]}" \
    --json "$RESULTS/long_run.json"
}

section_forward_gradient() {
  # One epoch: per block, forward gradients push up to 9 tangents a stage
  # (RevNet18 has 10 stages), about 20 times PETRA's work.
  local args=(--epochs 1)
  if ((smoke)); then args=(--smoke); fi
  echo "## Accuracy: forward gradients against PETRA and backprop"
  echo
  machine
  echo
  run $PY bench/accuracy.py --petra "$BIN/petra" "${args[@]}" \
    --only "backprop,PETRA k=1,forward gradient (local guess),forward gradient (random guess),local losses only" \
    --json "$RESULTS/forward_gradient.json"
}

section_transformer_recipe() {
  # Issue 36: the main job a transformer user runs first (every flag but
  # the architecture, the dataset and the epochs left out, so the recipe is
  # the default transformer one), then RevViT and RevNet18 with AdamW under
  # PETRA against backprop over 15 epochs, with each stage's cosine to the
  # end-to-end gradient. The 15-epoch runs use a sixth of Fashion-MNIST's
  # training set and RevViT patches of 7 (16 tokens), to fit an hour on 2
  # cores.
  local main=(--arch revvit --dataset fashion_mnist --epochs 1)
  local long=(--epochs 15 --train-limit 10000 --stages per-block,2
              --only "backprop,PETRA k=1" --e2e 100)
  local revnets=1
  if ((smoke)); then
    # CI's time: the accuracy section already runs accuracy.py's modes.
    main+=(--train-limit 512 --test-limit 128 --embed-dim 16 --depth 2)
    long=(--smoke --stages per-block --only "PETRA k=1" --e2e 10)
    revnets=0
  fi
  echo "## AdamW and the transformer recipe (RevViT, RevNet18)"
  echo
  machine
  echo
  echo "### The first run of a transformer user"
  echo
  RUN_FILTER="^(petra train:|epoch 1/1:|test accuracy)" run "$BIN/petra" \
    train "${main[@]}"
  echo
  echo "### RevViT under PETRA against backprop, transformer recipe"
  echo
  run $PY bench/accuracy.py --petra "$BIN/petra" --arch revvit \
    --model-flags "--patch-size 7" "${long[@]}" \
    --json "$RESULTS/transformer_recipe_revvit.json"
  echo
  if ((revnets)); then
    echo "### RevNet18 with AdamW, and with SGD (the default recipe)"
    echo
    run $PY bench/accuracy.py --petra "$BIN/petra" \
      --model-flags "--optimizer adamw" "${long[@]}" \
      --json "$RESULTS/transformer_recipe_revnet_adamw.json"
    echo
    run $PY bench/accuracy.py --petra "$BIN/petra" "${long[@]}" \
      --json "$RESULTS/transformer_recipe_revnet_sgd.json"
  fi
}

section_transformer() {
  # The size trains in under 15 minutes a run on 2 cores (RevViT, 16 tokens
  # of 64, 6 blocks; 15 epochs); the sweep's 5 runs took 43 minutes, the
  # micro-batch-8 pair about 14.
  local size="--patch-size 7" epochs=15 batch=64 split=1,7
  if ((smoke)); then
    size="--patch-size 7 --embed-dim 16 --depth 3 --heads 2" epochs=1
    batch=4 split=1,4
  fi
  echo "## Reversible vision transformers (RevViT) under PETRA"
  echo
  machine
  echo
  echo "### Accuracy: PETRA against backprop"
  echo
  # SGD at the shared rate, as these tables were measured before AdamW and
  # delay-scaled rates became revvit's defaults (the transformer_recipe
  # section measures those).
  local acc=(--arch revvit --model-flags "$size --optimizer sgd --delay-lr-power 0" --base-lr 0.1
             --epochs "$epochs" --only "backprop,PETRA k=1,PETRA k=4")
  if ((smoke)); then acc+=(--smoke); fi
  run $PY bench/accuracy.py --petra "$BIN/petra" "${acc[@]}" \
    --json "$RESULTS/transformer_accuracy.json"
  echo
  echo "### Per block and on 2 stages at micro-batch 8, k = 32"
  echo
  # The same batch (256) and lr (0.4) as k = 4 above, an eighth of the
  # delay in optimizer steps: what closes the per-block gap.
  local small=(--arch revvit --model-flags "$size --optimizer sgd --delay-lr-power 0 --micro-batch 8"
               --base-lr 0.0125 --epochs "$epochs" --only "PETRA k=32")
  if ((smoke)); then small+=(--smoke); fi
  run $PY bench/accuracy.py --petra "$BIN/petra" "${small[@]}" \
    --json "$RESULTS/transformer_small_micro_batch.json"
  echo
  echo "### PaReprop: one stage's backward with the rebuild overlapped"
  echo
  local pp=(--job-flags "--arch revvit $size --split-at $split" --blas-threads 0)
  if ((smoke)); then pp+=(--smoke); fi
  # shellcheck disable=SC2086
  run $PY bench/pareprop.py --petra "$BIN/petra" "${pp[@]}"
  echo
  echo "### Memory of the buffer configurations (paper, Table 3)"
  echo
  # shellcheck disable=SC2086
  run "$BIN/petra_bench_memory" --arch revvit --variant mnist $size \
    --micro-batch "$batch"
}

section_transport() {
  local sizes=(16 64 256) repeats=20
  if ((smoke)); then sizes=(1); repeats=2; fi
  echo "## Transport: a tensor between two stages on loopback, per data channel"
  echo
  machine
  local mb
  for mb in "${sizes[@]}"; do
    echo
    run "$BIN/petra_bench_transport" --device cpu --megabytes "$mb" \
      --repeats "$repeats" --transports grpc,grpc_bulk,shm
  done
  # What the bulk channel's connections add (4 above, the default).
  local mb_conn=64 conns
  if ((smoke)); then mb_conn=1; fi
  for conns in 1 2; do
    echo
    run "$BIN/petra_bench_transport" --device cpu --megabytes "$mb_conn" \
      --repeats "$repeats" --transports grpc_bulk --connections "$conns"
  done
}

# The flags and the label of a precision token of the precision and gpu
# sections: fp32, bf16, bf16-cl (and channels_last), bf16-wire (and bf16
# between stages). Sets `pflags` (an array) and `plabel`.
precision_flags() {
  case "$1" in
    fp32) pflags=(--precision fp32); plabel=fp32 ;;
    bf16) pflags=(--precision bf16); plabel=bf16 ;;
    bf16-cl) pflags=(--precision bf16 --memory-format channels_last)
      plabel="bf16 + channels_last" ;;
    bf16-wire) pflags=(--precision bf16 --wire-dtype bf16)
      plabel="bf16, bf16 between stages" ;;
    *) echo "bench.sh: unknown precision token '$1'" >&2; return 2 ;;
  esac
}

# Mixed precision on one device (training.precision, issue 34): stock
# PyTorch's ResNet18 and RevNet18 (fp32; bf16 autocast with channels_last)
# beside `petra train` in-process (backprop on one stage, PETRA on 2 stages
# and per block, fp32 and bf16), with the ratios and the rebuild error each
# run measured; then, on the CPU, the main job in both precisions (its test
# accuracy). BENCH_DEVICE=cuda for a GPU.
section_precision() {
  local dev=${BENCH_DEVICE:-cpu} width=0.25 mb=64 samples=3200
  local stock_warmup=2 stock_steps=10 main=1
  if [[ $dev == cuda* ]]; then
    width=1 mb=256 samples=51200 stock_warmup=5 stock_steps=30 main=0
  fi
  if ((smoke)); then
    width=0.125 mb=4 samples=64 stock_warmup=0 stock_steps=1 main=0
  fi
  echo "## Mixed precision: fp32 and bf16 beside stock PyTorch on one device"
  echo
  machine
  echo
  echo "Stock PyTorch first (the yardstick, on $dev), then \`petra train\`" \
    "in-process on the same device: RevNet18, CIFAR size, width $width," \
    "micro-batch $mb, $samples synthetic samples, one epoch; every run" \
    "measures the rebuild error on every 8th micro-batch:"
  echo
  run $PY bench/stock_pytorch.py --device "$dev" --batch "$mb" \
    --width "$width" --warmup "$stock_warmup" --steps "$stock_steps" \
    --json "$RESULTS/precision-stock.json"
  echo
  printf 'dataset { kind: DATASET_KIND_SYNTHETIC %s %s }\n' \
    "synthetic_train_size: $samples" "synthetic_test_size: $mb" \
    > "$RESULTS/precision-synthetic.textproto"
  # bf16 twice: in the device's default layout (auto: channels_last on a
  # GPU, NCHW on the CPU), and in channels_last, stock PyTorch's bf16 row.
  local runs=() cfg label mode stages precision report pflags plabel
  for cfg in backprop:1:fp32 backprop:1:bf16 backprop:1:bf16-cl \
      PETRA:2:fp32 PETRA:2:bf16 PETRA:2:bf16-cl PETRA:per-block:fp32 \
      PETRA:per-block:bf16 PETRA:per-block:bf16-cl; do
    IFS=: read -r label stages precision <<< "$cfg"
    precision_flags "$precision"
    mode=${label,,}
    report=$RESULTS/precision-$mode-$stages-$precision.json
    run "$BIN/petra" train --quiet \
      --from "$RESULTS/precision-synthetic.textproto" --runner in-process \
      --devices "$dev" --arch revnet18 --variant cifar --dataset synthetic \
      --width "$width" --stages "$stages" --micro-batch "$mb" --mode "$mode" \
      "${pflags[@]}" --rebuild-error-every 8 --epochs 1 --report "$report" \
      --output "${report%.json}.pt"
    echo
    precision=$plabel
    case "$stages" in
      1) label+=", 1 stage" ;;
      per-block) label+=", per block" ;;
      *) label+=", $stages stages" ;;
    esac
    if [[ -f "$report" ]]; then runs+=("$label, $precision=$report"); fi
  done
  run $PY bench/gpu_ratios.py --stock "$RESULTS/precision-stock.json" \
    ${runs[@]+"${runs[@]}"}
  echo
  if ((main)); then
    echo "### The main job in both precisions"
    echo
    echo "\`petra train\` on the embedded default (RevNet18 width 0.25," \
      "2 stages, Fashion-MNIST, 3 epochs), in-process, fp32, bf16, then" \
      "bf16 with bf16 between the stages:"
    echo
    runs=()
    for precision in fp32 bf16 bf16-wire; do
      precision_flags "$precision"
      report=$RESULTS/precision-main-$precision.json
      run "$BIN/petra" train --quiet --runner in-process "${pflags[@]}" \
        --rebuild-error-every 8 --report "$report" --output "${report%.json}.pt"
      echo
      if [[ -f "$report" ]]; then runs+=("main job, $plabel=$report"); fi
    done
    run $PY bench/gpu_ratios.py ${runs[@]+"${runs[@]}"}
    echo
  fi
}

# The GPU figures, all on one GPU, the headline ones first (a GPU lease is
# short, and BENCH_DEADLINE may stop the section). Needs a CUDA build:
# scripts/gpu/build.sh --bench runs this on its build. With --smoke the
# same commands run on the CPU at toy sizes (CI keeps them from rotting;
# the numbers mean nothing).
section_gpu() {
  local dev=cuda width=1 mb=256 pp_mb=(256 128) warmup=3 repeats=10
  local archs=(revnet18 revnet34 revnet50) samples=51200 megabytes=64
  local transfers=20 rounds=5 pp_extra=() stock_warmup=5 stock_steps=30
  if ((smoke)); then
    dev=cpu width=0.125 mb=4 pp_mb=(4 4) warmup=1 repeats=1
    archs=(revnet18) samples=64 megabytes=1 transfers=2 rounds=1
    pp_extra=(--smoke) stock_warmup=0 stock_steps=1
  elif ! "$BIN/petra_bench_transport" --device cuda --megabytes 1 \
      --repeats 1 >/dev/null 2>&1; then
    echo "bench.sh: section gpu needs a CUDA build and a GPU" \
      "($BIN/petra_bench_transport --device cuda fails here)" >&2
    return 2
  fi
  echo "## GPU: one-GPU throughput beside stock PyTorch, transport," \
    "profiles, predicted fleets, memory, PaReprop"
  echo
  machine
  local gpu_name
  gpu_name=$(nvidia-smi --query-gpu=name,driver_version \
    --format=csv,noheader 2>/dev/null | sed -n 1p) || true
  echo "${gpu_name:-No GPU}; torch" \
    "$($PY -c 'import torch; print(torch.__version__)' 2>/dev/null)."
  echo
  echo "### Training on one GPU, beside stock PyTorch on the same GPU"
  echo
  echo "Every stage on the one GPU (the paper's code simulates stages so);" \
    "RevNet18, CIFAR size, width $width, micro-batch $mb, $samples" \
    "synthetic samples, one epoch; first the yardstick, then our runs and" \
    "their ratios to it:"
  echo
  run $PY bench/stock_pytorch.py --device "$dev" --batch "$mb" \
    --width "$width" --warmup "$stock_warmup" --steps "$stock_steps" \
    --json "$RESULTS/gpu-stock.json"
  echo
  # 200 micro-batches an epoch, so filling and draining the pipeline (19
  # ticks per block) is a small part of it.
  printf 'dataset { kind: DATASET_KIND_SYNTHETIC %s %s }\n' \
    "synthetic_train_size: $samples" "synthetic_test_size: $mb" \
    > "$RESULTS/gpu-synthetic.textproto"
  local runs=() cfg mode stages runner report label precision pflags plabel
  # bf16 first: issue 34's target is PETRA in bf16 at >= 0.6 of stock
  # PyTorch's bf16 + channels_last.
  # BENCH_GPU_TRAIN picks some of these rows (a short GPU lease).
  local configs=(PETRA:2:in-process:bf16 PETRA:per-block:in-process:bf16
    backprop:1:in-process:bf16 PETRA:2:in-process:fp32
    PETRA:per-block:in-process:fp32 backprop:1:in-process:fp32
    PETRA:2:fleet:fp32 PETRA:2:fleet:bf16 PETRA:2:fleet:bf16-wire)
  if [[ -n "${BENCH_GPU_TRAIN:-}" ]]; then
    read -r -a configs <<< "$BENCH_GPU_TRAIN"
  fi
  for cfg in "${configs[@]}"; do
    IFS=: read -r label stages runner precision <<< "$cfg"
    precision_flags "$precision"
    mode=${label,,}
    report=$RESULTS/gpu-train-$mode-$stages-$runner-$precision.json
    run "$BIN/petra" train --quiet --from "$RESULTS/gpu-synthetic.textproto" \
      --runner "$runner" --devices "$dev" --arch revnet18 --variant cifar \
      --dataset synthetic --width "$width" --stages "$stages" \
      --micro-batch "$mb" --mode "$mode" "${pflags[@]}" \
      --rebuild-error-every 8 --epochs 1 --report "$report" \
      --output "${report%.json}.pt"
    echo
    case "$stages" in
      1) label+=", 1 stage" ;;
      per-block) label+=", per block" ;;
      *) label+=", $stages stages" ;;
    esac
    if [[ -f "$report" ]]; then
      runs+=("$label, $runner, $plabel=$report")
    fi
  done
  run $PY bench/gpu_ratios.py --stock "$RESULTS/gpu-stock.json" \
    ${runs[@]+"${runs[@]}"}
  echo
  echo "### Transport of device tensors"
  echo
  run "$BIN/petra_bench_transport" --device "$dev" --megabytes "$megabytes" \
    --repeats "$transfers"
  echo
  echo "### Per-block profiles on the GPU and the fleets they predict" \
    "(paper, Table 5: 3.0x on 10 GPUs, 2.4x on 18)"
  echo
  echo "Each block's forward and backward timed on the GPU (CIFAR-10 size," \
    "width $width, micro-batch $mb), then simulated with one GPU per stage" \
    "and 10 GB/s links:"
  echo
  for arch in "${archs[@]}"; do
    run "$BIN/petra" profile --arch "$arch" --variant cifar \
      --dataset synthetic --width "$width" --stages per-block \
      --micro-batch "$mb" --devices "$dev" --warmup "$warmup" \
      --repeats "$repeats" --output "$RESULTS/gpu-profile-$arch.json"
    echo
    run "$BIN/petra" simulate --profile "$RESULTS/gpu-profile-$arch.json" \
      --schedule all --link-bandwidth 1e10 --link-latency 2e-5 \
      --micro-batches 1000
    echo
  done
  echo "### Memory of the buffer configurations, from the device allocator" \
    "(paper, Table 3)"
  echo
  for arch in "${archs[@]}"; do
    run "$BIN/petra_bench_memory" --arch "$arch" --variant cifar \
      --width "$width" --micro-batch "$mb" --device "$dev"
    echo
  done
  echo "### PaReprop on the GPU (issue 18; the paper: up to +20%)"
  echo
  local sizes=("--patch-size 4 --micro-batch ${pp_mb[0]}"
    "--patch-size 2 --embed-dim 192 --heads 3 --micro-batch ${pp_mb[1]}")
  if ((smoke)); then
    sizes=("--patch-size 7 --embed-dim 16 --heads 2 --micro-batch 4")
  fi
  for size in "${sizes[@]}"; do
    run $PY bench/pareprop.py --petra "$BIN/petra" --rounds "$rounds" \
      "${pp_extra[@]}" \
      --job-flags "--arch revvit $size --split-at 1,7 --devices $dev"
    echo
  done
}

# A RevViT small enough for seconds-long smoke runs.
SMOKE_REVVIT="--arch revvit --patch-size 7 --embed-dim 16 --depth 2 --heads 2"

section_staleness() {
  local args=()
  if ((smoke)); then
    args=(--smoke --job-flags "$SMOKE_REVVIT --lr 0.1")
  fi
  echo "## Deep pipelines: which approximation destabilises (paper, Table 4)"
  echo
  machine
  echo
  run $PY bench/staleness.py --petra "$BIN/petra" "${args[@]}"
}

section_threads() {
  local args=()
  if ((smoke)); then
    args=(--smoke --job-flags "$SMOKE_REVVIT")
  fi
  echo "## Threads: torch's and OpenBLAS's on the same cores"
  echo
  machine
  echo
  run $PY bench/threads.py --petra "$BIN/petra" "${args[@]}"
}

section_feed() {
  # The feed against what it feeds: a 2-stage fleet at width 1 on these
  # cores (imagenet variant, synthetic data so the feed is not involved).
  local feed=(--images 1024 --side 224 --workers 1,2)
  local fleet=(--variant imagenet --width 1 --micro-batch 16 --max-steps 8
    --train-limit 256 --test-limit 32)
  if ((smoke)); then
    # The synthetic set at 224x224 alone takes half a minute to make.
    feed=(--images 192 --workers 1,2)
    fleet=(--variant cifar --width 0.125 --micro-batch 8 --max-steps 2
      --train-limit 32 --test-limit 8)
  fi
  echo "## The image-folder feed"
  echo
  machine
  echo
  echo "What the coordinator does to an image folder before sending a"
  echo "micro-batch (read, decode, random resized crop to 224x224, flip,"
  echo "normalise), timed over generated JPEGs, with its decode workers:"
  echo
  run "$BIN/petra_bench_feed" "${feed[@]}"
  echo
  echo "What it feeds: RevNet18, imagenet variant, 2 stages on the same"
  echo "cores, training samples/s (its data synthetic, held in memory):"
  echo
  run "$BIN/petra" train --quiet --arch revnet18 \
    --dataset synthetic --stages 2 "${fleet[@]}" \
    --report "$RESULTS/feed_fleet.json" --output "$RESULTS/feed_fleet.pt"
  $PY -c 'import json, sys
r = json.load(open(sys.argv[1]))
print("fleet: %.1f samples/s (%d optimizer steps)"
      % (r["samples_per_second"], r["optimizer_steps"]))' \
    "$RESULTS/feed_fleet.json"
}

section_peer() {
  local args=(--epochs 3) ours=(--micro-batches 937)
  if ((smoke)); then
    args=(--epochs 1 --train-limit 640 --test-limit 256 --width 0.125)
    ours=(--micro-batches 4 --width 0.125)
  fi
  echo "## A peer: the same RevNet18 in plain PyTorch (Python)"
  echo
  machine
  echo
  echo "The same network, data, recipe and seed as the accuracy section's"
  echo "backprop row (\`petra train --mode backprop --stages 1\`, which it"
  echo "matches loss for loss on one thread), trained by plain PyTorch on all"
  echo "cores:"
  echo
  run $PY bench/peer_pytorch.py "${args[@]}" --quiet \
    --json "$RESULTS/peer.json"
  echo
  echo "Beside it, our plain backprop in C++ (libtorch, the same network and"
  echo "cores, graph kept, one SGD step per micro-batch; one epoch):"
  echo
  run "$BIN/petra_bench_backprop" --threads "$(nproc)" --arch revnet18 \
    --width 0.25 --dataset fashion_mnist --seed 1 "${ours[@]}"
}

section_partition() {
  local args=()
  if ((smoke)); then args=(--smoke --repeats 1 --stages 2); fi
  echo "## Partition: the default split of --stages N against a measured one"
  echo
  machine
  echo
  echo "Each block's forward + backward measured on one core, and three"
  echo "splits scored by their slowest stage under those times (what bounds"
  echo "a pipeline's throughput): the default (FLOPs plus 250 per element"
  echo "written by a memory-bound layer, services/model/network_summary.cc),"
  echo "FLOPs alone (the default before), and the best for the measured"
  echo "times. \"vs best\" is the slowest stage over the best split's."
  echo
  run $PY bench/partition.py --petra "$BIN/petra" "${args[@]}"
}

section_probe() {
  local args=(--runs 10)
  if ((smoke)); then args=(--runs 2); fi
  echo "## Health probe cost (docs/DEPLOY.md, Probes)"
  echo
  machine
  echo
  echo "The container and Kubernetes probes run every 5-10 s in every pod:"
  echo "the client's \`petra health\` (which loads libtorch) against the"
  echo "\`petra-health\` binary the manifests now run."
  echo
  run $PY bench/probe_cost.py --bin-dir "$BIN" "${args[@]}"
}

section_compare() {
  local old=${BENCH_OLD_BIN:-} args=(--rounds 3 -- --width 0.25
    --micro-batches 200 --stages 2)
  if ((smoke)); then
    old=$BIN
    # One data channel: the throughput smoke runs both.
    args=(--rounds 1 -- --width 0.125 --micro-batches 4 --micro-batch 16
          --stages 2 --transports shm)
  fi
  if [[ -z "$old" ]]; then
    echo "bench.sh: compare needs BENCH_OLD_BIN, the other build's bin" \
      "directory" >&2
    return 2
  fi
  echo "## Two builds side by side (throughput)"
  echo
  machine
  echo
  echo "The build of this commit (new) against ${BENCH_OLD_COMMIT:-$old} (old),"
  echo "in alternating runs of the same benchmark, so that both see the same"
  echo "machine noise:"
  echo
  run $PY bench/compare_builds.py --old-bin "$old" --new-bin "$BIN" "${args[@]}"
}

section_main_job() {
  local old=${BENCH_OLD_BIN:-} args=(--rounds 2)
  if ((smoke)); then
    old=$BIN
    args=(--rounds 1 -- --width 0.125 --epochs 1 --train-limit 256
          --test-limit 64)
  fi
  if [[ -z "$old" ]]; then
    echo "bench.sh: main_job needs BENCH_OLD_BIN, the other build's bin" \
      "directory" >&2
    return 2
  fi
  echo "## The main job, two builds side by side"
  echo
  machine
  echo
  echo "\`petra train\` with no flags (what scripts/train.sh runs) by the build"
  echo "of this commit (new) and by ${BENCH_OLD_COMMIT:-$old} (old), alternating:"
  echo
  run $PY bench/main_job.py --old-bin "$old" --new-bin "$BIN" "${args[@]}"
}

# Each section runs in a subshell with errexit, so that a step outside
# run() that fails stops its own section only; what it wrote is kept.
touch "$RESULTS/failed.txt"
for SECTION in "${sections[@]}"; do
  echo "bench: section $SECTION" >&2
  : > "$RESULTS/$SECTION.md"
  set +e
  (set -e; "section_$SECTION" >> "$RESULTS/$SECTION.md")
  rc=$?
  set -e
  if ((rc != 0)); then
    printf '\n**The section stopped here** (exit %d).\n' "$rc" \
      >> "$RESULTS/$SECTION.md"
    echo "$SECTION: the section stopped (exit $rc)" >> "$RESULTS/failed.txt"
  fi
  flush_section
done
echo "bench: wrote ${sections[*]} into $DOC"
if [[ -s "$RESULTS/failed.txt" ]]; then
  echo "bench: what failed or did not run:" >&2
  sed 's/^/  /' "$RESULTS/failed.txt" >&2
  exit 1
fi
