# Sourced by scripts/bench.sh: the precision section and the gpu section (a CUDA build on a GPU host; --smoke runs it on the CPU).
# Each section_NAME prints its Markdown; run() and machine() are bench.sh's.
# shellcheck shell=bash

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
  local configs=(backprop:1:fp32 backprop:1:bf16 backprop:1:bf16-cl
    PETRA:2:fp32 PETRA:2:bf16 PETRA:2:bf16-cl PETRA:per-block:fp32
    PETRA:per-block:bf16 PETRA:per-block:bf16-cl)
  # The smoke: each mode, layout and precision once (one command, other
  # flags), in three runs instead of nine.
  if ((smoke)); then
    configs=(backprop:1:fp32 PETRA:2:bf16 PETRA:per-block:bf16-cl)
  fi
  for cfg in "${configs[@]}"; do
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
  local archs=(revnet18 revnet34 revnet50) samples=51200 mib=16,64,256
  local transfers=20 rounds=5 pp_extra=() stock_warmup=5 stock_steps=30
  local vit_samples=51200 vit_mb=256
  if ((smoke)); then
    dev=cpu width=0.125 mb=4 pp_mb=(4 4) warmup=1 repeats=1
    archs=(revnet18) samples=64 mib=1,2 transfers=2 rounds=1
    pp_extra=(--smoke) stock_warmup=0 stock_steps=1 vit_samples=64 vit_mb=4
  elif ! "$BIN/petra_bench_transport" --device cuda --megabytes 1 \
      --repeats 1 >/dev/null 2>&1; then
    echo "bench.sh: section gpu needs a CUDA build and a GPU" \
      "($BIN/petra_bench_transport --device cuda fails here)" >&2
    return 2
  fi
  echo "## GPU: the whole GPU path in one call (issue 48), then profiles," \
    "predicted fleets, memory, PaReprop"
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
    "their ratios to it. The fleet rows are two stage-server processes on" \
    "the one GPU, one per transport between them:"
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
  local transport tflags
  # Issue 48's order: the fleet beside the in-process runner for each
  # transport, then PETRA in fp32 and bf16 beside stock PyTorch (bf16 on a
  # GPU computes in channels_last, the default layout there). Tokens:
  # LABEL:STAGES:RUNNER:PRECISION[:TRANSPORT]; BENCH_GPU_TRAIN picks some.
  local configs=(PETRA:2:in-process:fp32 PETRA:2:fleet:fp32:cuda_ipc
    PETRA:2:fleet:fp32:shm PETRA:2:fleet:fp32:grpc_bulk
    PETRA:2:in-process:bf16 PETRA:per-block:in-process:bf16
    backprop:1:in-process:bf16 PETRA:per-block:in-process:fp32
    backprop:1:in-process:fp32 PETRA:2:fleet:bf16:cuda_ipc)
  # The CPU practice (--smoke) has no cuda_ipc: its rows are left out.
  if ((smoke)); then
    local kept=()
    for cfg in "${configs[@]}"; do
      [[ $cfg == *cuda_ipc* ]] || kept+=("$cfg")
    done
    configs=("${kept[@]}")
  fi
  if [[ -n "${BENCH_GPU_TRAIN:-}" ]]; then
    read -r -a configs <<< "$BENCH_GPU_TRAIN"
  fi
  for cfg in "${configs[@]}"; do
    transport=
    IFS=: read -r label stages runner precision transport <<< "$cfg"
    precision_flags "$precision"
    mode=${label,,}
    tflags=()
    [[ -z "$transport" ]] || tflags=(--transport "$transport")
    report=$RESULTS/gpu-train-$mode-$stages-$runner-$precision${transport:+-$transport}.json
    run "$BIN/petra" train --quiet --from "$RESULTS/gpu-synthetic.textproto" \
      --runner "$runner" --devices "$dev" --arch revnet18 --variant cifar \
      --dataset synthetic --width "$width" --stages "$stages" \
      --micro-batch "$mb" --mode "$mode" "${pflags[@]}" ${tflags[@]+"${tflags[@]}"} \
      --rebuild-error-every 8 --epochs 1 --report "$report" \
      --output "${report%.json}.pt"
    echo
    case "$stages" in
      1) label+=", 1 stage" ;;
      per-block) label+=", per block" ;;
      *) label+=", $stages stages" ;;
    esac
    if [[ -f "$report" ]]; then
      runs+=("$label, $runner${transport:+ ($transport)}, $plabel=$report")
    fi
  done
  run $PY bench/gpu_ratios.py --stock "$RESULTS/gpu-stock.json" \
    ${runs[@]+"${runs[@]}"}
  echo
  echo "### Transport of device tensors, $mib MiB"
  echo
  run "$BIN/petra_bench_transport" --device "$dev" --megabytes "$mib" \
    --repeats "$transfers" --transports grpc,grpc_bulk,shm,cuda_ipc
  cp "$RESULTS/out.txt" "$RESULTS/gpu-transport.md"
  echo
  echo "### RevViT with the conv stem, one epoch"
  echo
  printf 'dataset { kind: DATASET_KIND_SYNTHETIC %s %s }\n' \
    "synthetic_train_size: $vit_samples" "synthetic_test_size: $vit_mb" \
    > "$RESULTS/gpu-vit.textproto"
  run "$BIN/petra" train --quiet --from "$RESULTS/gpu-vit.textproto" \
    --runner in-process --devices "$dev" --arch revvit --stem conv \
    --variant cifar --dataset synthetic --stages 2 --micro-batch "$vit_mb" \
    --precision bf16 --epochs 1 --report "$RESULTS/gpu-revvit-conv.json" \
    --output "$RESULTS/gpu-revvit-conv.pt"
  echo
  echo "### Summary"
  echo
  run $PY bench/gpu_summary.py --results "$RESULTS" \
    ${PETRA_GPU_CTEST_LOG:+--ctest "$PETRA_GPU_CTEST_LOG"}
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

