package config

import (
	"errors"
	"fmt"
	"math/big"
	"reflect"

	"github.com/mitchellh/mapstructure"
	"github.com/zclconf/go-cty/cty"
)

// CTS decodes its configuration (files, and the task file of `task create`)
// with mapstructure's weakly typed input, after a hook that takes the one
// element of a one-element list where a single value is expected. So CTS
// loads `regexp = ["web"]` (a string), `names = "web"` (a list),
// `enabled = "true"` or `= 1` (a bool), `port = "8558"` (a number),
// `datacenter = 1` (a string). weakConvert converts a value to the type a
// field wants by handing it to mapstructure itself with those settings, so
// that ctsync accepts exactly what CTS's decoding accepts, and nothing more
// (numbers that are not whole stay refused for whole-number fields, where
// mapstructure would truncate them).

// errNullElement is returned for a list with a null element; at is its
// index.
type errNullElement struct{ at int }

func (e errNullElement) Error() string { return fmt.Sprintf("element %d is null", e.at) }

// weakConvert converts v (known, not null) to typ: cty.String, cty.Bool,
// cty.Number or cty.List(cty.String).
func weakConvert(v cty.Value, typ cty.Type) (cty.Value, error) {
	if typ.IsListType() && (v.Type().IsListType() || v.Type().IsTupleType() || v.Type().IsSetType()) {
		i := 0
		for it := v.ElementIterator(); it.Next(); i++ {
			if _, e := it.Element(); e.IsNull() {
				return cty.NilVal, errNullElement{i}
			}
		}
	}
	in, err := ctyNative(v)
	if err != nil {
		return cty.NilVal, err
	}
	switch {
	case typ == cty.String:
		var s string
		if err := weakDecode(in, &s); err != nil {
			return cty.NilVal, err
		}
		return cty.StringVal(s), nil
	case typ == cty.Bool:
		var b bool
		if err := weakDecode(in, &b); err != nil {
			return cty.NilVal, err
		}
		return cty.BoolVal(b), nil
	case typ == cty.Number:
		if v.Type() == cty.Number && !v.AsBigFloat().IsInt() {
			return v, nil // the caller refuses it as not whole
		}
		var n int64
		if err := weakDecode(in, &n); err != nil {
			return cty.NilVal, err
		}
		return cty.NumberIntVal(n), nil
	case typ.Equals(cty.List(cty.String)):
		var ss []string
		if err := weakDecode(in, &ss); err != nil {
			return cty.NilVal, err
		}
		if len(ss) == 0 {
			return cty.ListValEmpty(cty.String), nil
		}
		vals := make([]cty.Value, len(ss))
		for i, s := range ss {
			vals[i] = cty.StringVal(s)
		}
		return cty.ListVal(vals), nil
	}
	return cty.NilVal, fmt.Errorf("no weak conversion to %s", typ.FriendlyName())
}

// weakDecode decodes in into out as CTS's decoder does.
func weakDecode(in, out any) error {
	d, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		DecodeHook:       unwrapSingle,
		WeaklyTypedInput: true,
		Result:           out,
	})
	if err != nil {
		return err
	}
	return d.Decode(in)
}

// unwrapSingle is CTS's hook: where a single value is expected, a list of
// exactly one element stands for that element.
func unwrapSingle(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.Slice || to.Kind() == reflect.Slice || to.Kind() == reflect.Array {
		return data, nil
	}
	if l, ok := data.([]any); ok && len(l) == 1 {
		return l[0], nil
	}
	return data, nil
}

// ctyNative turns a known cty value into the Go values a decoder of text
// configuration produces: string, bool, int64 (whole numbers that fit) or
// float64, []any, map[string]any; nil for null.
func ctyNative(v cty.Value) (any, error) {
	if v.IsNull() {
		return nil, nil
	}
	if !v.IsKnown() {
		return nil, errors.New("not a constant value")
	}
	ty := v.Type()
	switch {
	case ty == cty.String:
		return v.AsString(), nil
	case ty == cty.Bool:
		return v.True(), nil
	case ty == cty.Number:
		f := v.AsBigFloat()
		if i, acc := f.Int64(); f.IsInt() && acc == big.Exact {
			return i, nil
		}
		fl, _ := f.Float64()
		return fl, nil
	case ty.IsListType() || ty.IsTupleType() || ty.IsSetType():
		out := make([]any, 0, v.LengthInt())
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			n, err := ctyNative(e)
			if err != nil {
				return nil, err
			}
			out = append(out, n)
		}
		return out, nil
	case ty.IsMapType() || ty.IsObjectType():
		out := make(map[string]any, v.LengthInt())
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			n, err := ctyNative(e)
			if err != nil {
				return nil, err
			}
			out[k.AsString()] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported value of type %s", ty.FriendlyName())
}
