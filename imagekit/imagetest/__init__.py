"""The host side of `imagekit test`: the image checked (image.py), the self-check in one
container (one_container.py), a passing image stamped (stamp.py), and the distributed part
across N containers: planned (nodes_plan.py), run (nodes_run.py, signals.py), judged
(nodes_verdict.py) and shown (nodes_report.py). The in-image side is imagekit/selfcheck/.
"""
