package pickle

// The opcodes of the pickle protocols 2 to 5 that hold data, as Python's
// Lib/pickletools.py names them.
const (
	OpProto           = 0x80
	OpFrame           = 0x95
	OpStop            = '.'
	OpMark            = '('
	OpEmptyDict       = '}'
	OpEmptyList       = ']'
	OpSetItems        = 'u'
	OpAppends         = 'e'
	OpBinInt          = 'J'
	OpBinInt1         = 'K'
	OpBinInt2         = 'M'
	OpLong1           = 0x8a
	OpBinFloat        = 'G'
	OpBinUnicode      = 'X'
	OpShortBinUnicode = 0x8c
	OpNone            = 'N'
	OpNewTrue         = 0x88
	OpNewFalse        = 0x89
	OpBinPut          = 'q'
	OpLongBinPut      = 'r'
	OpBinGet          = 'h'
	OpLongBinGet      = 'j'
	OpMemoize         = 0x94
	OpLong4           = 0x8b
	OpShortBinBytes   = 'C'
	OpBinBytes        = 'B'
	OpShortBinString  = 'U'
	OpBinString       = 'T'
	OpBinUnicode8     = 0x8d
	OpBinBytes8       = 0x8e
	OpByteArray8      = 0x96
	OpEmptyTuple      = ')'
	OpEmptySet        = 0x8f
	OpFrozenSet       = 0x91
	OpAddItems        = 0x90
	OpTuple           = 't'
	OpTuple1          = 0x85
	OpTuple2          = 0x86
	OpTuple3          = 0x87
	OpList            = 'l'
	OpDict            = 'd'
	OpAppend          = 'a'
	OpSetItem         = 's'
	OpPop             = '0'
	OpPopMark         = '1'
	OpDup             = '2'
)

// refused names the opcodes that would run code or call into Python.
var refused = map[byte]string{
	'c': "GLOBAL", 0x93: "STACK_GLOBAL", 'R': "REDUCE", 'b': "BUILD", 'i': "INST", 'o': "OBJ",
	0x81: "NEWOBJ", 0x92: "NEWOBJ_EX", 'P': "PERSID", 'Q': "BINPERSID", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4",
}

// Refused returns the name of op if it is an opcode that would run code
// or call into Python (GLOBAL, REDUCE, ...), which a reader of data
// refuses wherever it stands.
func Refused(op byte) (string, bool) {
	name, ok := refused[op]
	return name, ok
}
