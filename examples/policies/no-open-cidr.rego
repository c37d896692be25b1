# A ctsync policy (docs/safety.md): no run may open a network rule to the
# whole internet. It looks at every resource the plan creates or updates,
# whatever its type, for a cidr_blocks or ipv6_cidr_blocks attribute (at
# any depth: aws_security_group's ingress blocks hold one each) that lists
# 0.0.0.0/0 or ::/0.
package ctsync

open_to_all := {"0.0.0.0/0", "::/0"}

cidr_keys := {"cidr_blocks", "ipv6_cidr_blocks"}

deny contains msg if {
	some rc in input.plan.resource_changes
	some action in rc.change.actions
	action in {"create", "update"}
	walk(rc.change.after, [path, value])
	path[count(path) - 1] in cidr_keys
	some cidr in value
	cidr in open_to_all
	msg := sprintf("%s opens %s to everyone (task %s)", [rc.address, cidr, input.task.name])
}
