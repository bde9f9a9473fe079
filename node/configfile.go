package node

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"github.com/BurntSushi/toml"

	"github.com/micra-net/micra/internal/tomlfile"
)

// LoadFile reads a TOML configuration file over c. Every problem is
// named, not only the first, as FILE:LINE: KEY: what is wrong: each key
// that is unknown (so that a typo does not silently leave a default; with
// the key it was probably meant to be) or whose value has the wrong type
// (with what the key takes), in file order. A syntax error stops the
// reading, and c is then unchanged.
func (c *Config) LoadFile(path string) error {
	var prims map[string]toml.Primitive
	md, keys, err := tomlfile.Decode(path, &prims)
	if err != nil {
		return err
	}
	fields := map[string]reflect.Value{}
	v := reflect.ValueOf(c).Elem()
	for i := range v.NumField() {
		fields[v.Type().Field(i).Tag.Get("toml")] = v.Field(i)
	}
	var errs []error
	for _, k := range keys {
		key, at := k.Name, k.At
		f, ok := fields[key]
		if !ok {
			errs = append(errs, tomlfile.Unknown(k, Keys()))
			continue
		}
		val := reflect.New(f.Type())
		if err := md.PrimitiveDecode(prims[key], val.Interface()); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %s", at, key, wantType(key, f)))
			continue
		}
		f.Set(val.Elem())
	}
	return errors.Join(errs...)
}

// wantType says what a key of f's type takes, with an example from the
// defaults where there is one.
func wantType(key string, f reflect.Value) string {
	def := reflect.ValueOf(DefaultConfig())
	var example reflect.Value
	for i := range def.NumField() {
		if def.Type().Field(i).Tag.Get("toml") == key {
			example = def.Field(i)
		}
	}
	switch f.Kind() {
	case reflect.String:
		ex := "..."
		if s := example.String(); s != "" {
			ex = s
		}
		return fmt.Sprintf("takes text in quotes, like %s = %q", key, ex)
	case reflect.Int, reflect.Int64:
		return fmt.Sprintf("takes a whole number without quotes, like %s = %s", key, strconv.FormatInt(example.Int(), 10))
	case reflect.Bool:
		return "takes true or false, without quotes"
	case reflect.Slice:
		return fmt.Sprintf("takes a list, like %s = [\"...\", \"...\"]", key)
	}
	return "has the wrong type"
}
