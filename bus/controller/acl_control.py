"""ACLs (Kafka's AclControlManager): CreateAcls and DeleteAcls as committed metadata records.

ACLs are metadata like topics: CreateAcls and DeleteAcls commit `acl` and `remove_acl` records, each ACL with its
own id, so they replicate with the log and survive restarts in it and in snapshots.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from bus.controller.control_context import ControlContext
from bus.controller.errors import ControllerError
from bus.controller.image import acl_record, remove_acl_record
from bus.controller.metadata_log.record_log import MetadataRecord
from bus.security.acls import AclBinding, AclBindingFilter, InvalidAcl


class AclControlManager:
    def __init__(self, context: ControlContext) -> None:
        self._context = context

    def create_acls(self, acls: Sequence[AclBinding]) -> list[ControllerError | None]:
        """Add ACLs, one result each (None: created, or it existed already); every new one gets its id and all go in
        one entry. A binding Kafka refuses (an unknown code, an empty name, a CLUSTER resource not named
        kafka-cluster) fails alone with INVALID_REQUEST."""
        self._context.check_active()
        results: list[ControllerError | None] = []
        records: list[MetadataRecord] = []
        adding: set[AclBinding] = set()
        for acl in acls:
            try:
                acl.validate()
            except InvalidAcl as exc:
                results.append(ControllerError(ErrorCode.invalid_request, str(exc)))
                continue
            if acl not in adding and self._context.working.acls.id_of(acl) is None:
                adding.add(acl)
                records.append(acl_record(uuid.uuid4(), acl))
            results.append(None)
        if records:
            self._context.commit(records)
        return results

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding] | ControllerError]:
        """Remove every ACL each filter matches; per filter the ACLs it removed (an ACL two filters match is removed
        once and reported by both, as Kafka does), or INVALID_REQUEST for a filter with an UNKNOWN part. All
        removals go in one entry."""
        self._context.check_active()
        results: list[list[AclBinding] | ControllerError] = []
        removing: dict[uuid.UUID, None] = {}
        for acl_filter in filters:
            try:
                acl_filter.validate()
            except InvalidAcl as exc:
                results.append(ControllerError(ErrorCode.invalid_request, str(exc)))
                continue
            matched = [(acl_id, acl) for acl_id, acl in self._context.working.acls.items() if acl_filter.matches(acl)]
            removing.update(dict.fromkeys(acl_id for acl_id, _acl in matched))
            results.append([acl for _acl_id, acl in matched])
        if removing:
            self._context.commit([remove_acl_record(acl_id) for acl_id in removing])
        return results
