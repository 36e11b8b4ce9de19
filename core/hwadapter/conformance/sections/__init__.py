"""The kit's sections as pytest modules: `pytest --hwadapter-device TYPE --pyargs
hwadapter.conformance.sections.test_NAME` runs one."""
