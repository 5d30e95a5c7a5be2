# `sieve calibrate` on stories260K (no chat template, 2048-token context): a
# head profile comes out and lserve takes it; bad command lines exit 2 with a
# message naming the flag and what was expected.
set(cal_stories ${SIEVE_TEST_MODELS}/stories260K.gguf)
set(cal_small -m ${cal_stories} --ctx 600 --samples 2 --sink 16 --recent 64 -t 1)
function(sieve_calibrate_test name rc out_re err_re)
  add_test(NAME cli.calibrate.${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect.sh ${rc} "${out_re}" "${err_re}" -- $<TARGET_FILE:sieve> calibrate ${ARGN})
  set_tests_properties(cli.calibrate.${name} PROPERTIES LABELS cli)
endfunction()

sieve_calibrate_test(profile 0 "\"format\": \"sieve-head-profile\"" "2/2 samples" ${cal_small})
sieve_calibrate_test(shape 0 "\"n_head_kv\": 4" "" ${cal_small})
sieve_calibrate_test(help 0 "usage: sieve calibrate" "" --help)
sieve_calibrate_test(bad_task 2 "" "--task: 'ppl' is not a retrieval task" ${cal_small} --task ppl)
sieve_calibrate_test(bad_recent 2 "" "--recent: expected" ${cal_small} --recent 0)
sieve_calibrate_test(too_long 2 "" "--ctx 100000 exceeds the model's training context" -m ${cal_stories} --ctx 100000)
# At exactly the model's context the answer would run past it: refused, naming the longest --ctx that fits.
sieve_calibrate_test(answer_past_context 1 "" "--ctx 2048 makes a sample of [0-9]+ tokens with its answer .*past the model's context of 2048 tokens; try --ctx 20[0-9][0-9] or less" -m ${cal_stories} --ctx 2048 --samples 2 --sink 16 --recent 64 -t 1)
sieve_calibrate_test(missing_model 1 "" "cannot open" -m no-such-model.gguf)

# The profile drives lserve in `sieve run` (and a profile of another shape is refused).
add_test(NAME cli.calibrate.lserve_run
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/calibrate_lserve.sh $<TARGET_FILE:sieve> ${cal_stories})
set_tests_properties(cli.calibrate.lserve_run PROPERTIES LABELS cli)
