# `sieve eval` on stories260K (committed; no chat template, 512-token
# vocabulary, 2048-token context): the harness end to end, not accuracy —
# stories260K answers nothing. Two tasks x one length x two samples keep
# each run under a second. Checked: the md table's shape, dense against
# itself gives KL exactly 0 and agreement 100% (eval_selfcheck.sh), the f32
# reference mode, the JSON layout, and bad command lines (exit 2 with a
# message naming the flag and what was expected).
set(eval_stories ${SIEVE_TEST_MODELS}/stories260K.gguf)
set(eval_small -m ${eval_stories} --task passkey,niah_multikey --ctx 512 --samples 2 -t 1 -np 4)
function(sieve_eval_test name rc out_re err_re)
  add_test(NAME cli.eval.${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect.sh ${rc} "${out_re}" "${err_re}" -- $<TARGET_FILE:sieve> eval ${ARGN})
  set_tests_properties(cli.eval.${name} PROPERTIES LABELS cli)
endfunction()

# md: one column per task x length, the reference row and one row per policy.
sieve_eval_test(md_header 0 "^\\| policy \\| KV \\| passkey @512 \\| niah_multikey @512 \\|$" "" ${eval_small})
sieve_eval_test(md_reference 0 "^\\| dense \\(reference\\) \\| f16 \\| [0-9.]+ \\[[0-9.]+, [0-9.]+\\] · KL — · 1\\.00× \\| [0-9.]+ \\[[0-9.]+, [0-9.]+\\] · KL — · 1\\.00× \\|$" "" ${eval_small})
sieve_eval_test(md_dense 0 "^\\| dense \\| f16 \\| [0-9.]+ \\[[0-9.]+, [0-9.]+\\] · KL 0 · 1\\.00× \\| [0-9.]+ \\[[0-9.]+, [0-9.]+\\] · KL 0 · 1\\.00× \\|$" "" ${eval_small})
sieve_eval_test(md_details 0 "^\\| dense \\| f16 \\| niah_multikey \\| 512 \\| 2 \\| [0-9.]+ \\| [0-9.]+–[0-9.]+ \\| [0-9.]+ \\| 0 \\| 0 \\| 100\\.0 \\|" "" ${eval_small})
sieve_eval_test(progress 0 "" "sieve eval: 8/8 requests, .*ETA 0 s" ${eval_small})
# A first line before any request finishes, without an estimate to give yet.
sieve_eval_test(progress_start 0 "" "^sieve eval: 0/8 requests, starting, [0-9]+ s elapsed, ETA after the first request$" ${eval_small})
# The f32 oracle as the reference: its row says f32, the f16 row is compared to it.
sieve_eval_test(ref_f32 0 "^\\| dense \\(reference\\) \\| f32 \\| " "" ${eval_small} --ref-cache-type f32)
# K and V of different types: the policy rows' KV column names both (K/V).
sieve_eval_test(mixed_types 0 "^\\| dense \\| f16/bf16 \\| " "" ${eval_small} -ctk f16 -ctv bf16)
sieve_eval_test(rotated_keys 0 "^\\| dense \\| f16 rotated-K \\| " "" ${eval_small} -ctk f16 --rotate-k on)
sieve_eval_test(json_cells 0 "^  \"cells\": \\[$" "" ${eval_small} -o json)
sieve_eval_test(json_config 0 "\"ref_cache_type\": \"f32\"" "" ${eval_small} -o json --ref-cache-type f32)

add_test(NAME cli.eval.dense_selfcheck
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/eval_selfcheck.sh $<TARGET_FILE:sieve> ${eval_stories} 4 ${eval_small})
set_tests_properties(cli.eval.dense_selfcheck PROPERTIES LABELS cli)
# --dump-kept: the positions each lane keeps (dense: all; snapkv keep=0.5:
# half, the window among them), with 8-bit and with --exact activations.
if(Python3_Interpreter_FOUND)
  add_test(NAME cli.eval.dump_kept
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/eval_dump_kept.py $<TARGET_FILE:sieve> ${eval_stories} 4 ${eval_small})
  set_tests_properties(cli.eval.dump_kept PROPERTIES LABELS cli)
endif()

# A run split by seed (--seed, --samples, --depths) gives the whole run's
# samples, and eval/eval_table.py --pool of the parts the whole run's table.
if(Python3_Interpreter_FOUND)
  add_test(NAME cli.eval.split_and_pool
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/eval_table_pool.py $<TARGET_FILE:sieve> ${eval_stories}
                   ${CMAKE_SOURCE_DIR}/eval/eval_table.py)
  set_tests_properties(cli.eval.split_and_pool PROPERTIES LABELS cli)
endif()

# Bad command lines: exit 2 before (or, for lengths, right after) the model loads.
sieve_eval_test(help 0 "usage: sieve eval" "" --help)
sieve_eval_test(bad_task 2 "" "--task: unknown task 'bogus'; expected one of passkey, niah_multikey" ${eval_small} --task bogus)
sieve_eval_test(bad_policy 2 "" "--kv-policy: KV policy 'snapkb': unknown policy 'snapkb'; known policies: dense, streaming, snapkv" ${eval_small} --kv-policy snapkb)
sieve_eval_test(bad_policy_value 2 "" "KV policy 'snapkv:keep=2': keep=2: expected a number in \\(0, 1\\]" ${eval_small} --kv-policy snapkv:keep=2)
# A policy with every row kept is dense: KL exactly 0 against the reference.
sieve_eval_test(snapkv_full_budget 0 "^\\| snapkv:budget=4096 \\| f16 \\| [0-9.]+ \\[[0-9.]+, [0-9.]+\\] · KL 0 · 1\\.00× \\|" "" ${eval_small} --kv-policy snapkv:budget=4096)
# A real compression: the ratio shows it.
sieve_eval_test(snapkv_keep 0 "^\\| snapkv:keep=0.25 \\| f16 \\| [0-9.]+ \\[[0-9.]+, [0-9.]+\\] · KL [0-9.e-]+ · [34]\\.[0-9]+× \\|" "" ${eval_small} --kv-policy snapkv:keep=0.25)
sieve_eval_test(bad_policy_key 2 "" "dense has no key 'budget' \\(it takes no keys\\)" ${eval_small} --kv-policy dense:budget=64)
sieve_eval_test(bad_policy_form 2 "" "'budget' is not key=value" ${eval_small} --kv-policy dense:budget)
sieve_eval_test(bad_policy_file 2 "" "KV policy file 'no-such\\.json': cannot open it" ${eval_small} --kv-policy @no-such.json)
sieve_eval_test(ctx_too_long 2 "" "--ctx 4096 exceeds the model's training context \\(2048 tokens\\)" ${eval_small} --ctx 4096)
# The answer needs positions too: a 2040-token passkey prompt and its 32
# answer tokens do not fit 2048 (the message names the longest that does).
sieve_eval_test(ctx_no_room_for_answer 2 "" "--ctx 2040: a passkey prompt of 2040 tokens and its 32 answer tokens need 2072 positions, beyond the model's training context \\(2048 tokens\\); give passkey lengths up to 2016" ${eval_small} --ctx 2040)
sieve_eval_test(ctx_answer_budget 2 "" "its 16 answer tokens need 2056 positions.*up to 2032, or fewer --max-tokens" ${eval_small} --ctx 2040 --max-tokens 16)
sieve_eval_test(ctx_answer_fits 0 "^\\| dense \\| f16 \\| " "" ${eval_small} --ctx 2040 --max-tokens 8)
# A sample is its length within 1%: cwe at 1990 has prompts of 1992 tokens,
# so with a nominal 1990 + 58 = 2048 the answer budget of those samples gives
# way by 2 tokens instead of the engine refusing the cell.
sieve_eval_test(ctx_overshoot_at_the_edge 0 "^\\| dense \\| f16 \\| " "" -m ${eval_stories} --task cwe --ctx 1990 --samples 6 -t 1 -np 4 --max-tokens 58)
sieve_eval_test(ctx_too_short 2 "" "task '[a-z_]+' cannot be made 64 tokens long: .*ask for at least" ${eval_small} --ctx 64)
sieve_eval_test(bad_ctx 2 "" "--ctx: expected an integer" ${eval_small} --ctx 512,x)
sieve_eval_test(bad_samples 2 "" "--samples: expected an integer in \\[1, " ${eval_small} --samples 0)
sieve_eval_test(bad_depths 2 "" "--depths: expected fractions in \\[0, 1\\], got '1.5'" ${eval_small} --depths 0.5,1.5)
sieve_eval_test(bad_format 2 "" "-o: expected md, json or jsonl, got 'csv'" ${eval_small} -o csv)
sieve_eval_test(bad_ref_type 2 "" "--ref-cache-type: expected f16, bf16, f32, q8_0 or q4_0, got 'q8'" ${eval_small} --ref-cache-type q8)
sieve_eval_test(unknown_flag 2 "" "unknown option '--bogus'" ${eval_small} --bogus)
sieve_eval_test(missing_model 1 "" "cannot open 'no-such-file\\.gguf'" -m no-such-file.gguf --samples 1)

# Rows share the prompt KV through the prefix cache (the default): every
# sample's result equals --no-prefix-cache's, field for field.
if(Python3_Interpreter_FOUND)
  add_test(NAME cli.eval.share_prefill
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/eval_share_prefill.py $<TARGET_FILE:sieve> ${eval_stories})
  set_tests_properties(cli.eval.share_prefill PROPERTIES LABELS cli)
endif()
