# `sieve bench` on stories260K: every output format, depth rows, and bad
# command lines. --bandwidth skips the 1 GiB bandwidth measurement; -r 2 and
# small sizes keep each test well under a second. No timing is asserted, only
# the shape of the output.
#
# Also builds make_bench_model, the writer of the real-shaped benchmark models
# (scripts/bench_models.sh puts them in the model cache).
add_executable(make_bench_model ${CMAKE_SOURCE_DIR}/tests/model/make_bench_model.cpp)
target_compile_options(make_bench_model PRIVATE ${SIEVE_WARNINGS})
target_link_libraries(make_bench_model PRIVATE sieve_lib)

set(bench_stories ${SIEVE_TEST_MODELS}/stories260K.gguf)
set(bench_small -m ${bench_stories} -p 16 -n 4 -r 2 --bandwidth 20)
function(sieve_bench_test name rc out_re err_re)
  add_test(NAME cli.bench.${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect.sh ${rc} "${out_re}" "${err_re}" -- $<TARGET_FILE:sieve> bench ${ARGN})
  set_tests_properties(cli.bench.${name} PROPERTIES LABELS cli)
endfunction()

# md: llama-bench's columns, test names with depth, tg rows carry GB/s and % bw.
sieve_bench_test(md_header 0 "\\| model \\| size \\| params \\| backend \\| threads \\| test \\| t/s \\| GB/s \\| % bw \\|" "" ${bench_small})
sieve_bench_test(md_rows 0 "\\| llama 293K F32 \\| 1\\.12 MiB \\| 292\\.80 K \\| CPU \\| 1 \\| pp16 \\| [0-9.]+ ± [0-9.]+ \\|  \\|  \\|" "" ${bench_small} -t 1)
sieve_bench_test(md_depth 0 "\\| tg4 @ d40 \\| [0-9.]+ ± [0-9.]+ \\| [0-9.]+ \\| [0-9.]+ \\|" "" ${bench_small} -d 0,40)
# Depth past one batch: the depth fill takes several forward passes.
sieve_bench_test(md_deep_batch 0 "pp16 @ d70 " "" ${bench_small} -d 70 -b 32)
sieve_bench_test(contiguous 0 "tg4 @ d40" "" ${bench_small} -d 40 --kv contiguous)
# jsonl: one object per line with llama-bench's field names and sieve's own
# (expect.sh matches line by line: one test per row kind).
sieve_bench_test(jsonl_pp 0
  "^\\{\"build_commit\": \"sieve\".*\"model_filename\": \"[^\"]*stories260K\\.gguf\", \"model_type\": \"llama 293K F32\", \"model_size\": 1171200, \"model_n_params\": 292800, \"n_batch\": 512, .*\"n_threads\": 2, \"type_k\": \"f16\", \"type_v\": \"f16\".*\"n_prompt\": 16, \"n_gen\": 0, \"n_depth\": 0, .*\"avg_ns\": [0-9]+, \"stddev_ns\": [0-9]+, \"avg_ts\": [0-9.]+, \"stddev_ts\": [0-9.]+, \"median_ts\": [0-9.]+, \"gbps\": null, \"bw_frac\": null, \"bw_gbps\": 20\\.0+, \"samples_ns\": \\[[0-9]+, [0-9]+\\], \"samples_ts\": \\[[0-9.]+, [0-9.]+\\]\\}$"
  "" ${bench_small} -t 2 -o jsonl)
sieve_bench_test(jsonl_tg 0 "^\\{.*\"n_prompt\": 0, \"n_gen\": 4, \"n_depth\": 0, .*\"gbps\": [0-9.]+, \"bw_frac\": [0-9.]+, " "" ${bench_small} -o jsonl)
sieve_bench_test(json_array 0 "^    \"n_gen\": 4,$" "" ${bench_small} -o json)
sieve_bench_test(json_close 0 "^\\]$" "" ${bench_small} -o json)
sieve_bench_test(csv_header 0 "^build_commit,cpu_info,backends,model_filename,model_type,model_size,model_n_params,n_batch,n_ubatch,n_threads,type_k,type_v,k_rotated,kv_store,kv_policy,use_mmap,huge_frac,n_prompt,n_gen,n_depth,.*avg_ts,stddev_ts,median_ts,gbps,bw_frac,bw_gbps,samples_ns,samples_ts$" "" ${bench_small} -o csv)
sieve_bench_test(csv_row 0 "^\"sieve\",.*,\"llama 293K F32\",1171200,292800,512,512,[0-9]+,\"f16\",\"f16\",0,\"vattention\",\"dense\",0,[0-9.]+,0,4,0," "" ${bench_small} -o csv)
# Lists: comma lists and repeats; -p 0 skips pp.
sieve_bench_test(list_comma 0 "\\| pp12 \\|" "" -m ${bench_stories} -p 8,12 -n 2 -n 3 -r 2 --bandwidth 20 -t 1)
sieve_bench_test(list_repeat 0 "\\| tg3 \\|" "" -m ${bench_stories} -p 8,12 -n 2 -n 3 -r 2 --bandwidth 20 -t 1)
sieve_bench_test(no_pp 0 "tg4" "" ${bench_small} -p 0)
# -mmp / --mmap (llama-bench's flag): 1 leaves the weights mapped, 0 (the
# default) copies them to the huge-page arena; stderr says how much was copied.
sieve_bench_test(mmap_default 0 "\"use_mmap\": false, \"huge_frac\": [0-9.]+" "weights copied at load, [0-9]+% on huge pages" ${bench_small} -o jsonl)
sieve_bench_test(mmap_on 0 "\"use_mmap\": true, " "0\.0 MiB of weights copied at load.*-mmp 1" ${bench_small} -mmp 1 -o jsonl)
sieve_bench_test(bad_mmap 2 "" "-mmp: expected 0 or 1, got 'yes'" ${bench_small} -mmp yes)
# Bad command lines name the flag and what was expected.
# --kv-policy: the depth fill is compressed; the label shows in the test name and jsonl.
sieve_bench_test(policy_md 0 "\\| tg4 @ d70 snapkv:keep=0.25 \\| [0-9.]+ ± [0-9.]+ \\|" "" ${bench_small} -d 70 --kv-policy snapkv:keep=0.25)
sieve_bench_test(policy_sliding 0 "\\| tg4 @ d70 streaming:budget=20 \\|" "" ${bench_small} -d 70 --kv-policy streaming:budget=20 -n 4)
sieve_bench_test(policy_h2o 0 "\\| pp16 @ d70 h2o:keep=0.5 \\|" "" ${bench_small} -d 0,70 --kv-policy h2o:keep=0.5)
sieve_bench_test(policy_jsonl 0 "\"kv_policy\": \"pyramidkv:keep=0.3\"" "" ${bench_small} -d 70 --kv-policy pyramidkv:keep=0.3 -o jsonl)
sieve_bench_test(bad_policy 2 "" "--kv-policy: KV policy 'snapkv:agg=sum': agg=sum: expected mean or max" ${bench_small} --kv-policy snapkv:agg=sum)
sieve_bench_test(policy_contiguous 2 "" "--kv-policy needs --kv vattention" ${bench_small} --kv-policy snapkv --kv contiguous)
# -npl / --n-parallel (llama-batched-bench): P slots each hold the depth, a tg
# step is one forward pass of P tokens; rows carry n_parallel (1 by default,
# with no step fields), and in a run with P > 1 step_ms and step_ratio (the
# step time over the n_parallel = 1 row's); pp prefills every slot's prompt.
sieve_bench_test(npl_default_jsonl 0 "\"n_depth\": 0, \"n_parallel\": 1, \"test_time\".*\"bw_gbps\": 20\\.0+, \"samples_ns\"" "" ${bench_small} -o jsonl)
sieve_bench_test(npl_jsonl_1 0 "^\\{.*\"n_prompt\": 0, \"n_gen\": 4, \"n_depth\": 5, \"n_parallel\": 1, .*\"step_ms\": [0-9.]+, \"step_ratio\": 1\\.0+, \"samples_ns\"" "" ${bench_small} -npl 1,3 -n 4 -d 5 -o jsonl)
sieve_bench_test(npl_jsonl_3 0 "^\\{.*\"n_prompt\": 0, \"n_gen\": 4, \"n_depth\": 5, \"n_parallel\": 3, .*\"gbps\": [0-9.]+, \"bw_frac\": [0-9.]+, \"bw_gbps\": [0-9.]+, \"step_ms\": [0-9.]+, \"step_ratio\": [0-9.]+, " "" ${bench_small} -npl 1,3 -n 4 -d 5 -o jsonl)
sieve_bench_test(npl_jsonl_pp 0 "^\\{.*\"n_prompt\": 16, \"n_gen\": 0, \"n_depth\": 5, \"n_parallel\": 3, .*\"gbps\": null, .*\"step_ms\": null, \"step_ratio\": null, " "" ${bench_small} -npl 3,1 -d 5 -o jsonl)
# Without 1 in the list there is no step ratio.
sieve_bench_test(npl_no_ratio 0 "\"n_parallel\": 2, .*\"step_ms\": [0-9.]+, \"step_ratio\": null, " "" ${bench_small} -p 0 -npl 2 -o jsonl)
sieve_bench_test(npl_md_header 0 "\\| threads \\| n_parallel \\| test \\| t/s \\| step ms \\| x1 step \\| GB/s \\| % bw \\|" "" ${bench_small} -npl 1,3)
sieve_bench_test(npl_md_row 0 "\\| CPU \\| 1 \\| 3 \\| tg4 @ d5 x3 \\| [0-9.]+ ± [0-9.]+ \\| [0-9.]+ \\| [0-9.]+ \\| [0-9.]+ \\| [0-9.]+ \\|" "" ${bench_small} -t 1 -npl 1,3 -d 5)
sieve_bench_test(npl_csv 0 "^build_commit,.*,n_depth,n_parallel,.*,bw_gbps,step_ms,step_ratio,samples_ns,samples_ts$" "" ${bench_small} -npl 2 -o csv)
# A tg step of P tokens needs no -b of P; the paged baseline holds P slots too.
sieve_bench_test(npl_small_batch 0 "\\| tg4 @ d10 x4 \\|" "" ${bench_small} -npl 4 -b 2 -d 10)
sieve_bench_test(npl_contiguous 0 "\\| tg4 @ d40 x2 \\|" "" ${bench_small} -npl 2 -d 40 --kv contiguous)
# With a policy each slot's depth is compressed and restored on its own; the
# sliding and scoring policies run their decode point per slot after each step.
sieve_bench_test(npl_policy_sliding 0 "\\| tg4 @ d70 x2 streaming:budget=20 \\|" "" ${bench_small} -d 70 -npl 1,2 --kv-policy streaming:budget=20)
sieve_bench_test(npl_policy_h2o 0 "\\| pp16 @ d70 x2 h2o:keep=0.5 \\|" "" ${bench_small} -d 70 -npl 2 --kv-policy h2o:keep=0.5)
sieve_bench_test(bad_npl_zero 2 "" "-npl: expected an integer in \\[1, 256\\], got 0" ${bench_small} -npl 0)
sieve_bench_test(bad_npl_text 2 "" "-npl: expected an integer, got 'x'" ${bench_small} -npl 2,x)
sieve_bench_test(bad_npl_large 2 "" "--n-parallel: expected an integer in \\[1, 256\\], got 257" ${bench_small} --n-parallel 257)
sieve_bench_test(help 0 "usage: sieve bench" "" --help)
sieve_bench_test(bad_format 2 "" "-o: expected md, csv, json or jsonl, got 'xml'" ${bench_small} -o xml)
sieve_bench_test(bad_list 2 "" "-p: expected" ${bench_small} -p 8,x)
sieve_bench_test(bad_threads 2 "" "-t: expected" ${bench_small} -t 0)
sieve_bench_test(bad_bandwidth 2 "" "--bandwidth: expected" ${bench_small} --bandwidth -3)
sieve_bench_test(unknown_flag 2 "" "unknown option '--bogus'" ${bench_small} --bogus)
sieve_bench_test(missing_model 1 "" "cannot open 'no-such-file\\.gguf'" -m no-such-file.gguf -p 8 -n 0 -r 1 --bandwidth 20)
# --kv-memory / --kv-page-size as in run and serve: a pool that fits runs, one
# too small for the depth stops with the pool's error, a bad size names the flag.
sieve_bench_test(kv_memory 0 "tg4 @ d40" "" ${bench_small} -d 40 --kv-memory 8MiB --kv-page-size 4KiB)
sieve_bench_test(kv_memory_small 1 "" "KV pool exhausted: all 16 pages of 4 KiB .*raise --kv-memory" ${bench_small} -d 300 --kv-memory 64KiB --kv-page-size 4KiB)
sieve_bench_test(kv_memory_past_ram 1 "" "is more than this machine has available .*ask for at most" ${bench_small} --kv-memory 100TiB)
sieve_bench_test(bad_kv_memory 2 "" "--kv-memory: " ${bench_small} --kv-memory lots)
sieve_bench_test(bad_kv_page 1 "" "KV page size 3072 bytes: expected a multiple of 4 KiB" ${bench_small} --kv-page-size 3KiB)

# KV row types (llama.cpp's -ctk / -ctv): f32 is the oracle mode, bf16 too;
# K and V in different types, or an unknown type, are refused with a reason.
sieve_bench_test(cache_type_f32 0 "\"type_k\": \"f32\", \"type_v\": \"f32\"" "" ${bench_small} -d 40 -ctk f32 -ctv f32 -o jsonl)
sieve_bench_test(cache_type_bf16 0 "\"type_k\": \"bf16\", \"type_v\": \"bf16\"" "" ${bench_small} -d 40 --cache-type-k bf16 -o jsonl)
sieve_bench_test(cache_type_mixed 0 "\"type_k\": \"bf16\", \"type_v\": \"f16\"" "" ${bench_small} -d 40 -ctk bf16 -ctv f16 -o jsonl)
sieve_bench_test(rotate_k 0 "\"type_k\": \"bf16\", \"type_v\": \"bf16\", \"k_rotated\": true" "" ${bench_small} -d 40 -ctk bf16 --rotate-k on -o jsonl)
sieve_bench_test(cache_type_mixed_f32 2 "" "--cache-type-k f32 with --cache-type-v f16: f32 rows \\(the exact oracle\\) go with f32 only" ${bench_small} -ctk f32 -ctv f16)
sieve_bench_test(cache_type_bad 2 "" "--cache-type-k: expected f16, bf16, f32, q8_0 or q4_0, got 'q5_1'" ${bench_small} -ctk q5_1)
sieve_bench_test(cache_type_quant_head_dim 1 "" "KV rows of type q8_0 need head_dim to be a multiple of 32; this model's head_dim is 8" ${bench_small} -ctk q8_0)

# Page selection: the decode reads a subset (reported on stderr and in jsonl),
# the depth fill is not compressed.
sieve_bench_test(quest_md 0 "\\| tg4 @ d300 quest:budget=64,page=16 \\|" "decode read [0-9.]+% of the lanes' rows .*selector [0-9.]+ ms per token" ${bench_small} -d 300 --kv-policy quest:budget=64,page=16)
sieve_bench_test(quest_jsonl 0 "\"read_frac\": 0\\.[0-9]+, \"select_ms\": [0-9.]+" "" ${bench_small} -d 300 -p 0 --kv-policy quest:budget=64,page=16,full_layers=0 -o jsonl)
sieve_bench_test(quest_bad_page 2 "" "page=24: expected a multiple of 16 rows" ${bench_small} --kv-policy quest:page=24)
