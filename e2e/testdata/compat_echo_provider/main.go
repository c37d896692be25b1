// Command terraform-provider-echo is a test provider for ctsync's
// compatibility suite. Its configuration has arguments of every type a
// terraform_provider block can hold; its one data source, echo_config,
// returns that configuration as JSON (the token only as a SHA-256 digest),
// so a module can write down exactly what the provider received.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	dsschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func main() {
	err := providerserver.Serve(context.Background(), func() provider.Provider { return &echoProvider{} },
		providerserver.ServeOpts{Address: "registry.terraform.io/ctsync/echo", ProtocolVersion: 5})
	if err != nil {
		log.Fatal(err)
	}
}

type endpointModel struct {
	URL     types.String `tfsdk:"url"`
	Timeout types.Number `tfsdk:"timeout"`
}

type configModel struct {
	Token    types.String   `tfsdk:"token"`
	Region   types.String   `tfsdk:"region"`
	Retries  types.Number   `tfsdk:"retries"`
	Insecure types.Bool     `tfsdk:"insecure"`
	Zones    types.List     `tfsdk:"zones"`
	Labels   types.Map      `tfsdk:"labels"`
	Endpoint *endpointModel `tfsdk:"endpoint"`
}

// received is what echo_config reports.
type received struct {
	TokenSHA256 *string           `json:"token_sha256"`
	Region      *string           `json:"region"`
	Retries     *string           `json:"retries"`
	Insecure    *bool             `json:"insecure"`
	Zones       []string          `json:"zones"`
	Labels      map[string]string `json:"labels"`
	Endpoint    *struct {
		URL     *string `json:"url"`
		Timeout *string `json:"timeout"`
	} `json:"endpoint"`
}

type echoProvider struct{ got string }

func (p *echoProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "echo"
}

func (p *echoProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Attributes: map[string]schema.Attribute{
			"token":    schema.StringAttribute{Optional: true, Sensitive: true},
			"region":   schema.StringAttribute{Optional: true},
			"retries":  schema.NumberAttribute{Optional: true},
			"insecure": schema.BoolAttribute{Optional: true},
			"zones":    schema.ListAttribute{Optional: true, ElementType: types.StringType},
			"labels":   schema.MapAttribute{Optional: true, ElementType: types.StringType},
		},
		Blocks: map[string]schema.Block{
			"endpoint": schema.SingleNestedBlock{Attributes: map[string]schema.Attribute{
				"url":     schema.StringAttribute{Optional: true},
				"timeout": schema.NumberAttribute{Optional: true},
			}},
		},
	}
}

func str(v types.String) *string {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	s := v.ValueString()
	return &s
}

func num(v types.Number) *string {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	s := v.ValueBigFloat().Text('f', -1)
	return &s
}

func (p *echoProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m configModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var r received
	if t := str(m.Token); t != nil {
		sum := sha256.Sum256([]byte(*t))
		h := hex.EncodeToString(sum[:])
		r.TokenSHA256 = &h
	}
	r.Region, r.Retries = str(m.Region), num(m.Retries)
	if !m.Insecure.IsNull() {
		b := m.Insecure.ValueBool()
		r.Insecure = &b
	}
	if !m.Zones.IsNull() {
		r.Zones = []string{}
		resp.Diagnostics.Append(m.Zones.ElementsAs(ctx, &r.Zones, false)...)
	}
	if !m.Labels.IsNull() {
		r.Labels = map[string]string{}
		resp.Diagnostics.Append(m.Labels.ElementsAs(ctx, &r.Labels, false)...)
	}
	if e := m.Endpoint; e != nil {
		r.Endpoint = &struct {
			URL     *string `json:"url"`
			Timeout *string `json:"timeout"`
		}{str(e.URL), num(e.Timeout)}
	}
	b, err := json.Marshal(r)
	if err != nil {
		resp.Diagnostics.AddError("encoding configuration", err.Error())
		return
	}
	p.got = string(b)
	resp.DataSourceData = p
}

func (p *echoProvider) Resources(context.Context) []func() resource.Resource { return nil }

func (p *echoProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{func() datasource.DataSource { return &configDataSource{} }}
}

type configDataSource struct{ p *echoProvider }

func (d *configDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_config"
}

func (d *configDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = dsschema.Schema{Attributes: map[string]dsschema.Attribute{
		"json": dsschema.StringAttribute{Computed: true},
	}}
}

func (d *configDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, _ *datasource.ConfigureResponse) {
	if p, ok := req.ProviderData.(*echoProvider); ok {
		d.p = p
	}
}

func (d *configDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	got := "null"
	if d.p != nil {
		got = d.p.got
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("json"), got)...)
}
