"""The Kubernetes object model that ``tfboot manifests`` and ``tfboot inject`` share, below
both: reading manifests (``documents``), the workloads and their Pod templates of every kind
(``workloads``), the environment the kubelet and a device plugin give a container
(``environment``), DRA claims and their MPS limits (``claims``, ``dracaps``), KAI
Scheduler's annotations (``kai``), the headroom a share keeps (``headroom``), the parts
inject adds (``template``) and the Python options that keep its hook out (``interpreter``),
and the findings a check reports (``report``, ``rules``). Neither tool imports the other.
"""
