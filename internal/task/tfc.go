package task

// TFCWorkspace is a task's terraform_cloud_workspace block: how the HCP
// Terraform / Terraform Enterprise workspace that runs the task is set up
// (terraform-cloud driver only). The zero value leaves every setting to
// the server's defaults.
type TFCWorkspace struct {
	// ExecutionMode is "remote" (default) or "agent".
	ExecutionMode string `json:"execution_mode,omitempty"`
	// AgentPoolID or AgentPoolName choose the agent pool of the "agent"
	// execution mode (the name is looked up in the organization).
	AgentPoolID   string `json:"agent_pool_id,omitempty"`
	AgentPoolName string `json:"agent_pool_name,omitempty"`
	// TerraformVersion is the workspace's Terraform version; empty: the
	// server's default for a new workspace, unchanged for an existing one.
	TerraformVersion string `json:"terraform_version,omitempty"`
}

// Execution modes of a TFCWorkspace.
const (
	ExecutionRemote = "remote"
	ExecutionAgent  = "agent"
)
