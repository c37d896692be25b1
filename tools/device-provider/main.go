// Command terraform-provider-device is a test provider that behaves like a
// slow network device, for measuring and testing how ctsync applies
// catalog changes. Its objects (resource device_object) are files in a
// directory: the file named as the object holds its value. Reading an
// object waits read_delay, writing or deleting one waits write_delay.
// Changing the files by hand is an out-of-band change to the device.
//
// `make tools` builds it into the tools mirror as ctsync/device.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	pschema "github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func main() {
	err := providerserver.Serve(context.Background(), func() provider.Provider { return &deviceProvider{} },
		providerserver.ServeOpts{Address: "registry.terraform.io/ctsync/device", ProtocolVersion: 5})
	if err != nil {
		log.Fatal(err)
	}
}

type deviceProvider struct{}

type providerModel struct {
	Dir        types.String `tfsdk:"dir"`
	ReadDelay  types.String `tfsdk:"read_delay"`
	WriteDelay types.String `tfsdk:"write_delay"`
}

func (p *deviceProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "device"
}

func (p *deviceProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = pschema.Schema{
		Description: "A directory standing in for a network device: one file per object.",
		Attributes: map[string]pschema.Attribute{
			"dir": pschema.StringAttribute{Required: true,
				Description: "The existing directory holding the device's objects."},
			"read_delay": pschema.StringAttribute{Optional: true,
				Description: `How long each read of an object takes, as a Go duration ("50ms"); default 0.`},
			"write_delay": pschema.StringAttribute{Optional: true,
				Description: `How long each create, update or delete of an object takes, as a Go duration; default 0.`},
		},
	}
}

// parseDelay reads an optional duration setting; null means 0.
func parseDelay(v types.String) (time.Duration, error) {
	if v.IsNull() || v.IsUnknown() {
		return 0, nil
	}
	d, err := time.ParseDuration(v.ValueString())
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (examples: \"50ms\", \"1s\")", v.ValueString())
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", v.ValueString())
	}
	return d, nil
}

func (p *deviceProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if m.Dir.IsUnknown() {
		return // known at apply time; the resources report it if it stays unknown
	}
	d := &device{dir: m.Dir.ValueString()}
	if st, err := os.Stat(d.dir); err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("dir"), "Invalid device directory", err.Error())
	} else if !st.IsDir() {
		resp.Diagnostics.AddAttributeError(path.Root("dir"), "Invalid device directory", d.dir+" is not a directory")
	}
	var err error
	if d.readDelay, err = parseDelay(m.ReadDelay); err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("read_delay"), "Invalid read_delay", err.Error())
	}
	if d.writeDelay, err = parseDelay(m.WriteDelay); err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("write_delay"), "Invalid write_delay", err.Error())
	}
	if resp.Diagnostics.HasError() {
		return
	}
	resp.ResourceData = d
}

func (p *deviceProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{func() resource.Resource { return &objectResource{} }}
}

func (p *deviceProvider) DataSources(context.Context) []func() datasource.DataSource { return nil }

type objectResource struct{ dev *device }

type objectModel struct {
	ID    types.String `tfsdk:"id"`
	Name  types.String `tfsdk:"name"`
	Value types.String `tfsdk:"value"`
}

func (r *objectResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_object"
}

func (r *objectResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "An object on the device: the file named name in the provider's dir, holding value.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, Description: "The object's name.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"name": schema.StringAttribute{Required: true, Description: "The object's name (its file name); a new name replaces the object.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
			"value": schema.StringAttribute{Required: true, Description: "The object's value (its file's content)."},
		},
	}
}

func (r *objectResource) Configure(_ context.Context, req resource.ConfigureRequest, _ *resource.ConfigureResponse) {
	if d, ok := req.ProviderData.(*device); ok {
		r.dev = d
	}
}

// ValidateConfig refuses names that are not a single file name at plan time.
func (r *objectResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var name types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("name"), &name)...)
	if name.IsNull() || name.IsUnknown() {
		return
	}
	if err := checkName(name.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("name"), "Invalid object name", err.Error())
	}
}

func (r *objectResource) configured() error {
	if r.dev == nil {
		return errors.New("the device provider is not configured (its dir is unknown or invalid)")
	}
	return nil
}

func (r *objectResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m objectModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.configured(); err != nil {
		resp.Diagnostics.AddError("Cannot create the object", err.Error())
		return
	}
	if err := r.dev.write(ctx, m.Name.ValueString(), m.Value.ValueString()); err != nil {
		resp.Diagnostics.AddError("Cannot create the object", err.Error())
		return
	}
	m.ID = m.Name
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *objectResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m objectModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.configured(); err != nil {
		resp.Diagnostics.AddError("Cannot read the object", err.Error())
		return
	}
	v, err := r.dev.read(ctx, m.Name.ValueString())
	if errors.Is(err, errGone) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the object", err.Error())
		return
	}
	m.Value = types.StringValue(v)
	m.ID = m.Name
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *objectResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m objectModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.configured(); err != nil {
		resp.Diagnostics.AddError("Cannot update the object", err.Error())
		return
	}
	if err := r.dev.update(ctx, m.Name.ValueString(), m.Value.ValueString()); err != nil {
		resp.Diagnostics.AddError("Cannot update the object", err.Error())
		return
	}
	m.ID = m.Name
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *objectResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m objectModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.configured(); err != nil {
		resp.Diagnostics.AddError("Cannot delete the object", err.Error())
		return
	}
	if err := r.dev.remove(ctx, m.Name.ValueString()); err != nil {
		resp.Diagnostics.AddError("Cannot delete the object", err.Error())
	}
}

var (
	_ provider.Provider                   = (*deviceProvider)(nil)
	_ resource.ResourceWithConfigure      = (*objectResource)(nil)
	_ resource.ResourceWithValidateConfig = (*objectResource)(nil)
)
