"""`make scale-model`: the users' load on the real rules, in virtual time.

Drives the real `decide` and `DeliveryService` (shared/) over the in-memory
store, timer queues and platform of tests/fakes.py with a simulated clock: a
uniform sample of the rooms gets exactly the per-room load of the full
deployment, and every aggregate (index range, queue, function) is scaled up
by the inverse of the sample. It then prints, per component, the peak and
p99 rates against Google's documented limits (limits.py) and exits 1 if any
passes its limit. docs/scale.md quotes a run and says what it does not show.

Modules: `traffic` (the load and the platform's statuses), `meter` (rates
per window, index ranges from infra/firestore.tf), `limits` (the documented
limits with their sources), `__main__` (the run and its report).
"""
