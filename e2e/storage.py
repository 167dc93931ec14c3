"""A stand-in for the CSI external-provisioner of storage the e2e cluster cannot have (FSx for Lustre, EBS): for a
Pending claim whose StorageClass names such a provisioner, it creates a PersistentVolume with that CSI driver, the
claim's size and access modes and a claimRef, as the external-provisioner does; the controller-manager's
PersistentVolume controller binds the two. Claims of other classes are left alone."""
from __future__ import annotations

import threading
from collections.abc import Callable

STAND_IN_PROVISIONERS = ("fsx.csi.aws.com", "ebs.csi.aws.com", "efs.csi.aws.com")
# The CSIDriver objects the drivers' Helm charts install (what `make bootstrap` reads): FSx for Lustre as docs/eks.md
# asks (fsGroupPolicy File, so fsGroup reaches its ReadWriteMany claims), the others with their charts' defaults.
DRIVER_FS_GROUP_POLICY = {"fsx.csi.aws.com": "File", "ebs.csi.aws.com": "ReadWriteOnceWithFSType",
                          "efs.csi.aws.com": "ReadWriteOnceWithFSType"}


class Provisioner:
    def __init__(self, env: str, api_client, log: Callable[[str], None]):
        from kubernetes import client
        self.env, self.log = env, log
        self.core, self.storage = client.CoreV1Api(api_client), client.StorageV1Api(api_client)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"provisioner-{env}", daemon=True)

    def start(self) -> None:
        self.register_drivers()
        self.thread.start()

    def register_drivers(self) -> None:
        from kubernetes import client
        for name, policy in DRIVER_FS_GROUP_POLICY.items():
            driver = client.V1CSIDriver(metadata=client.V1ObjectMeta(name=name), spec=client.V1CSIDriverSpec(
                attach_required=False, fs_group_policy=policy))
            try:
                self.storage.create_csi_driver(driver)
            except client.ApiException as exc:
                if exc.status != 409:
                    raise

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(10)

    def _loop(self) -> None:
        while not self.stop_event.wait(2):
            try:
                self.sync()
            except Exception as exc:  # noqa: BLE001 - the next round retries
                self.log(f"provisioner {self.env}: {exc}")

    def sync(self) -> None:
        from kubernetes import client
        classes = {sc.metadata.name: sc for sc in self.storage.list_storage_class().items}
        for pvc in self.core.list_persistent_volume_claim_for_all_namespaces().items:
            if pvc.status.phase != "Pending" or pvc.spec.volume_name:
                continue
            sc = classes.get(pvc.spec.storage_class_name or "")
            if sc is None or sc.provisioner not in STAND_IN_PROVISIONERS:
                continue
            name = f"pvc-{pvc.metadata.uid}"
            pv = client.V1PersistentVolume(
                metadata=client.V1ObjectMeta(name=name, annotations={
                    "pv.kubernetes.io/provisioned-by": sc.provisioner}),
                spec=client.V1PersistentVolumeSpec(
                    capacity={"storage": pvc.spec.resources.requests["storage"]},
                    access_modes=pvc.spec.access_modes, storage_class_name=sc.metadata.name,
                    persistent_volume_reclaim_policy=sc.reclaim_policy or "Delete",
                    mount_options=sc.mount_options,
                    csi=client.V1CSIPersistentVolumeSource(driver=sc.provisioner, volume_handle=f"e2e-{name}"),
                    claim_ref=client.V1ObjectReference(kind="PersistentVolumeClaim", namespace=pvc.metadata.namespace,
                                                       name=pvc.metadata.name, uid=pvc.metadata.uid)))
            try:
                self.core.create_persistent_volume(pv)
                self.log(f"provisioner {self.env}: {sc.provisioner} volume {name} for "
                         f"{pvc.metadata.namespace}/{pvc.metadata.name}")
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
