"""What `python -m bench.mutation` mutates, and the fast tests it runs on
each module's mutants: the test files that pin it in-process, less those
tests in them that run whole programs (`SLOW`)."""

PROVE, REWRITE = "compare/_src/prove", "compare/_src/rewrite"
VERDICT_TESTS = (
    "tests/test_verdict_rules.py", "tests/test_equivalence.py",
    "tests/test_verdict_words.py", "tests/test_verdict_edges.py",
    "tests/test_equivalence_edges.py", "tests/test_mutation_survivors.py",
    "tests/test_sign_flips.py")
REWRITE_TESTS = (
    "tests/test_rewrite_global.py", "tests/test_rewrite_global_places.py",
    "tests/test_rewrite_global_elsewhere.py",
    "tests/test_rewrite_global_factory.py",
    "tests/test_rewrite_global_functions.py",
    "tests/test_rewrite_global_handed.py", "tests/test_rewrite_global_wmt.py",
    "tests/test_rewrite_global_declared.py",
    "tests/test_rewrite_global_ours.py", "tests/test_rewrite_global_reads.py",
    "tests/test_rewrite_imported_axis.py",
    "tests/test_rewrite_removed_puts.py", "tests/test_rewrite_survivors.py",
    "tests/test_rewrite_mutation_units.py",
    "tests/test_rewrite_mutation_reader.py",
    "tests/test_rewrite_mutation_calls.py")
# What the removed puts and the report texts go through, and where the
# scopes are read first: smaller sets, a shorter first run.
PUTS_TESTS = ("tests/test_rewrite_removed_puts.py",
              "tests/test_rewrite_global_places.py",
              "tests/test_rewrite_survivors.py")
SCOPES_TESTS = ("tests/test_rewrite_global_places.py",
                "tests/test_rewrite_global_reads.py",
                "tests/test_rewrite_global_elsewhere.py",
                "tests/test_rewrite_survivors.py")
# The pmaps of other libraries (flax nnx, equinox), read and written.
OTHER_PMAPS_TESTS = ("tests/test_rewrite_nnx_equinox.py",
                     "tests/test_rewrite_other_pmaps.py",
                     "tests/test_rewrite_other_pmaps_units.py")
# Dotted names and pmap's uses: read by every rewrite; the unit files.
NAMES_TESTS = ("tests/test_rewrite_names.py",
               "tests/test_rewrite_survivors.py",
               "tests/test_rewrite_pipeline_units.py",
               "tests/test_rewrite_mutation_units.py")
# Short name -> (source file, the fast test files that pin it).
MODULES = {
    "verdicts": (f"{PROVE}/verdicts.py", VERDICT_TESTS),
    "leaf_bands": (f"{PROVE}/leaf_bands.py", VERDICT_TESTS),
    "flips": (f"{PROVE}/flips.py", VERDICT_TESTS),
    "lockstep": (f"{PROVE}/lockstep.py",
                 (*VERDICT_TESTS, "tests/test_lockstep_units.py",
                  "tests/test_lockstep_retakes.py")),
    "equivalence": (f"{PROVE}/equivalence.py",
                    (*VERDICT_TESTS, "tests/test_conversions.py")),
    "host_copies": (f"{PROVE}/host_copies.py",
                    ("tests/test_lockstep_units.py",
                     "tests/test_lockstep_retakes.py")),
    "global_scopes": (f"{REWRITE}/read/global_scopes.py", SCOPES_TESTS),
    "global_reader": (f"{REWRITE}/read/global_reader.py", REWRITE_TESTS),
    "global_calls": (f"{REWRITE}/read/global_calls.py", REWRITE_TESTS),
    "rewrite_helpers": (f"{REWRITE}/rewrite_helpers.py", PUTS_TESTS),
    "stacked_calls": (f"{REWRITE}/read/stacked_calls.py", PUTS_TESTS),
    "pipeline_batches": (f"{REWRITE}/read/pipeline_batches.py",
                         ("tests/test_rewrite_pipeline_units.py",)),
    "other_pmap_args": (f"{REWRITE}/read/other_pmap_args.py",
                        OTHER_PMAPS_TESTS),
    "global_static": (f"{REWRITE}/write/global_static.py",
                      ("tests/test_rewrite_static.py",
                       "tests/test_rewrite_mutation_units.py")),
    "pipeline_reads": (f"{REWRITE}/read/pipeline_reads.py",
                       ("tests/test_rewrite_pipeline_units.py",
                        "tests/test_rewrite_pipeline_reads.py")),
    "pipeline_written": (f"{REWRITE}/write/pipeline_written.py",
                         ("tests/test_rewrite_pipeline_units.py",
                          "tests/test_rewrite_pipeline_reads.py",
                          "tests/test_rewrite_pipeline_written.py")),
    "names": (f"{REWRITE}/read/names.py", NAMES_TESTS),
    "other_pmaps_write": (f"{REWRITE}/write/other_pmaps_write.py",
                          OTHER_PMAPS_TESTS),
    "other_pmaps_file": (f"{REWRITE}/write/other_pmaps_file.py",
                         OTHER_PMAPS_TESTS),
    "on_port_layout": (f"{REWRITE}/proof/on_port_layout.py",
                       ("tests/test_rewrite_port_layout_units.py",
                        "tests/test_rewrite_proof_donation.py")),
}
# The tests in those files that run whole programs (a rewritten program
# run or proved: 2.5 s to a minute each on 2 busy cores): left out.
_G = "tests/test_rewrite_global"
SLOW = tuple(f"{file}.py::test_{name}" for file, name in (
    (_G, "a_script_holds_no_stacked_layout_and_prints_the_same"),
    (_G, "global_prove_passes_and_a_wrong_spec_fails"),
    (_G, "prefetched_batches_become_global_batches"),
    (_G, "an_axis_named_by_a_module_constant_takes_the_second_step"),
    (_G, "static_arguments_take_the_second_step"),
    (f"{_G}_factory", "vision_transformers_shapes_take_the_second_step"),
    (f"{_G}_reads", "a_replicated_value_returned_by_name_is_followed"),
    (f"{_G}_reads", "index_0_of_an_output_keeps_it_per_device"),
    (f"{_G}_reads", "a_copy_of_flax_shard_places_the_global_batch"),
    (f"{_G}_reads", "trees_placed_and_read_back_together"),
    (f"{_G}_reads", "an_output_read_per_device_keeps_its_devices"),
    (f"{_G}_elsewhere", "a_named_and_an_unnamed_pmap_take_a_mesh_each"),
    (f"{_G}_elsewhere",
     "a_pmap_naming_no_axis_and_a_lambda_parameter_take_the_step"),
    (f"{_G}_elsewhere", "jax_spmd_mnist_goes_global_but_its_batches"),
    (f"{_G}_functions",
     "the_state_is_followed_through_the_programs_functions"),
    (f"{_G}_functions", "a_function_given_its_state_by_keyword_is_followed"),
    (f"{_G}_handed", "a_step_handed_to_the_programs_function_is_followed"),
    (f"{_G}_handed", "a_key_per_device_fed_back_by_keyword_stays_stacked"),
    (f"{_G}_places", "the_same_layout_on_either_side_of_an_if_is_taken"),
    (f"{_G}_places",
     "a_nested_function_giving_the_step_its_values_is_taken"),
    (f"{_G}_declared", "metrics_taken_as_one_copy_fail_the_proof"),
    (f"{_G}_declared", "the_declared_global_step_is_proved"),
    (f"{_G}_declared", "a_pmap_made_in_a_factory_takes_the_ports_layout"),
    (f"{_G}_wmt", "wmt_as_written_names_the_two_reads_of_pmaps_layout"),
    (f"{_G}_wmt", "wmt_with_the_persons_edit_takes_the_second_step"),
    ("tests/test_rewrite_imported_axis",
     "a_pmap_over_this_processs_devices_takes_the_second_step"),
    ("tests/test_rewrite_removed_puts",
     "the_rewrite_prints_what_the_original_printed"),
    ("tests/test_rewrite_removed_puts",
     "global_from_the_original_or_the_first_step_runs_the_same"),
    ("tests/test_rewrite_nnx_equinox",
     "each_program_prints_the_same_numbers_after_both_steps"),
    ("tests/test_rewrite_static", "both_steps_print_the_originals_numbers")))

# Issue 73's split of the global writer (write/pmap_sites, placements,
# global_step; plan/step_specs, reaching, step_outputs): every rewrite goes
# through them, and every test of every rewrite file would run on each
# mutant (a mutant of pmap_sites took minutes on 2 busy cores): the unit
# files that rewrite small programs in-process, no program run.
WRITE_UNITS = ("tests/test_rewrite_mutation_units.py",
               "tests/test_rewrite_write_units.py",
               "tests/test_rewrite_reaching.py")
MODULES.update({
    "pmap_sites": (f"{REWRITE}/write/pmap_sites.py", WRITE_UNITS),
    "placements": (f"{REWRITE}/write/placements.py", WRITE_UNITS),
    "global_step": (f"{REWRITE}/write/global_step.py", WRITE_UNITS),
    "step_specs": (f"{REWRITE}/plan/step_specs.py", WRITE_UNITS),
    "reaching": (f"{REWRITE}/plan/reaching.py", WRITE_UNITS),
    "step_outputs": (f"{REWRITE}/plan/step_outputs.py", WRITE_UNITS),
})
