"""hosts.doctor_probe, run in this process: each check on its own."""
