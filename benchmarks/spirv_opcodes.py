"""The SPIR-V instructions a Vulkan compute shader can hold, by opcode: the fuzz's table (benchmarks/fuzz_spirv.py
names instructions by it and damages ids and opcodes with it).

``OPS[opcode] = (name, form, kind)``. The form lists the instruction's operands in order:

* ``T`` its result type, ``R`` its result id (both first where present);
* one operand: ``v`` a value, ``t`` a type, ``l`` a label, ``f`` a function, ``x`` an extended instruction set,
  ``c`` a scope and ``e`` another integer constant (memory semantics, an array's length), ``a`` any id, ``n`` a
  literal word, ``s`` a literal string; ``?`` after one of them: the operand may be left out;
* the rest of the instruction: ``V`` values, ``A`` any ids, ``Y`` types, ``N`` literal words, ``P`` (value,
  label) pairs, ``W`` (literal, label) pairs, ``Q`` (id, literal) pairs, ``M`` memory operands, ``I`` image
  operands.

``kind`` groups instructions whose operands' types follow one rule. (The package checked SPIR-V with this
table before SPIRV-Tools' validator took the check over; the fuzz keeps it so that a seed damages modules as
it did then, and runs before and after compare case by case.)
"""

from __future__ import annotations

_F = "TRvv"  # a binary operation
_U = "TRv"  # a unary one
_ATOMIC = "TRvcev"
_GROUP = "TRcnv"

OPS: dict[int, tuple[str, str, str]] = {
    # debug and module-level instructions
    0: ("Nop", "", ""), 1: ("Undef", "TR", ""), 2: ("SourceContinued", "s", ""), 3: ("Source", "nnN", ""),
    4: ("SourceExtension", "s", ""), 5: ("Name", "as", ""), 6: ("MemberName", "ans", "member"),
    7: ("String", "Rs", ""), 8: ("Line", "ann", ""), 10: ("Extension", "s", ""), 11: ("ExtInstImport", "Rs", ""),
    12: ("ExtInst", "TRxnA", "ext"), 14: ("MemoryModel", "nn", ""), 15: ("EntryPoint", "nfsA", "entry"),
    16: ("ExecutionMode", "fN", "mode"), 17: ("Capability", "n", ""), 317: ("NoLine", "", ""),
    330: ("ModuleProcessed", "s", ""), 331: ("ExecutionModeId", "fnA", "mode"),
    # types
    19: ("TypeVoid", "R", ""), 20: ("TypeBool", "R", ""), 21: ("TypeInt", "Rnn", "tint"),
    22: ("TypeFloat", "RnN", "tfloat"), 23: ("TypeVector", "Rtn", "tvector"), 24: ("TypeMatrix", "Rtn", "tmatrix"),
    25: ("TypeImage", "RtnnnnnnN", "timage"), 26: ("TypeSampler", "R", ""), 27: ("TypeSampledImage", "Rt", "tsampled"),
    28: ("TypeArray", "Rte", "tarray"), 29: ("TypeRuntimeArray", "Rt", "telement"), 30: ("TypeStruct", "RY", "tstruct"),
    31: ("TypeOpaque", "Rs", ""), 32: ("TypePointer", "Rnt", "tpointer"), 33: ("TypeFunction", "RtY", "tfunction"),
    39: ("TypeForwardPointer", "tn", ""),
    # constants
    41: ("ConstantTrue", "TR", "bool"), 42: ("ConstantFalse", "TR", "bool"), 43: ("Constant", "TRN", "constant"),
    44: ("ConstantComposite", "TRV", "construct"), 45: ("ConstantSampler", "TRnnn", ""), 46: ("ConstantNull", "TR", ""),
    48: ("SpecConstantTrue", "TR", "bool"), 49: ("SpecConstantFalse", "TR", "bool"),
    50: ("SpecConstant", "TRN", "constant"), 51: ("SpecConstantComposite", "TRV", "construct"),
    52: ("SpecConstantOp", "TRnN", ""),
    # functions, memory
    54: ("Function", "TRnt", "function"), 55: ("FunctionParameter", "TR", ""), 56: ("FunctionEnd", "", ""),
    57: ("FunctionCall", "TRfV", "call"), 59: ("Variable", "TRnv?", "variable"),
    60: ("ImageTexelPointer", "TRvvv", "texel"), 61: ("Load", "TRvM", "load"), 62: ("Store", "vvM", "store"),
    63: ("CopyMemory", "vvM", "copy"), 64: ("CopyMemorySized", "vvvM", ""), 65: ("AccessChain", "TRvV", "chain"),
    66: ("InBoundsAccessChain", "TRvV", "chain"), 67: ("PtrAccessChain", "TRvvV", "chain"),
    68: ("ArrayLength", "TRvn", "length"), 70: ("InBoundsPtrAccessChain", "TRvvV", "chain"),
    400: ("CopyLogical", _U, ""), 401: ("PtrEqual", _F, ""), 402: ("PtrNotEqual", _F, ""), 403: ("PtrDiff", _F, ""),
    # decorations
    71: ("Decorate", "anN", "decorate"), 72: ("MemberDecorate", "annN", "member"), 73: ("DecorationGroup", "R", ""),
    74: ("GroupDecorate", "aA", ""), 75: ("GroupMemberDecorate", "aQ", ""), 332: ("DecorateId", "anA", ""),
    5632: ("DecorateString", "anN", ""), 5633: ("MemberDecorateString", "annN", "member"),
    # composites
    77: ("VectorExtractDynamic", "TRvv", "vextract"), 78: ("VectorInsertDynamic", "TRvvv", "vinsert"),
    79: ("VectorShuffle", "TRvvN", "shuffle"), 80: ("CompositeConstruct", "TRV", "construct"),
    81: ("CompositeExtract", "TRvN", "extract"), 82: ("CompositeInsert", "TRvvN", "insert"),
    83: ("CopyObject", _U, "same"), 84: ("Transpose", _U, "linear"),
    # images
    86: ("SampledImage", "TRvv", "sampledimage"), 87: ("ImageSampleImplicitLod", "TRvvI", "sample"),
    88: ("ImageSampleExplicitLod", "TRvvI", "sample"), 89: ("ImageSampleDrefImplicitLod", "TRvvvI", "sample"),
    90: ("ImageSampleDrefExplicitLod", "TRvvvI", "sample"), 91: ("ImageSampleProjImplicitLod", "TRvvI", "sample"),
    92: ("ImageSampleProjExplicitLod", "TRvvI", "sample"), 93: ("ImageSampleProjDrefImplicitLod", "TRvvvI", "sample"),
    94: ("ImageSampleProjDrefExplicitLod", "TRvvvI", "sample"), 95: ("ImageFetch", "TRvvI", "fetch"),
    96: ("ImageGather", "TRvvvI", "sample"), 97: ("ImageDrefGather", "TRvvvI", "sample"),
    98: ("ImageRead", "TRvvI", "read"), 99: ("ImageWrite", "vvvI", "write"), 100: ("Image", _U, "image"),
    101: ("ImageQueryFormat", _U, "query"), 102: ("ImageQueryOrder", _U, "query"),
    103: ("ImageQuerySizeLod", _F, "query"), 104: ("ImageQuerySize", _U, "query"),
    105: ("ImageQueryLod", _F, "notcompute"),
    106: ("ImageQueryLevels", _U, "query"), 107: ("ImageQuerySamples", _U, "query"),
    # conversions
    109: ("ConvertFToU", _U, "f2i"), 110: ("ConvertFToS", _U, "f2i"), 111: ("ConvertSToF", _U, "i2f"),
    112: ("ConvertUToF", _U, "i2f"), 113: ("UConvert", _U, "i2i"), 114: ("SConvert", _U, "i2i"),
    115: ("FConvert", _U, "f2f"), 116: ("QuantizeToF16", _U, "float"), 117: ("ConvertPtrToU", _U, "pointerint"),
    120: ("ConvertUToPtr", _U, "pointerint"), 124: ("Bitcast", _U, "bitcast"),
    # arithmetic
    126: ("SNegate", _U, "int"), 127: ("FNegate", _U, "float"), 128: ("IAdd", _F, "int"), 129: ("FAdd", _F, "float"),
    130: ("ISub", _F, "int"), 131: ("FSub", _F, "float"), 132: ("IMul", _F, "int"), 133: ("FMul", _F, "float"),
    134: ("UDiv", _F, "int"), 135: ("SDiv", _F, "int"), 136: ("FDiv", _F, "float"), 137: ("UMod", _F, "int"),
    138: ("SRem", _F, "int"), 139: ("SMod", _F, "int"), 140: ("FRem", _F, "float"), 141: ("FMod", _F, "float"),
    142: ("VectorTimesScalar", _F, "linear"), 143: ("MatrixTimesScalar", _F, "linear"),
    144: ("VectorTimesMatrix", _F, "linear"),
    145: ("MatrixTimesVector", _F, "linear"), 146: ("MatrixTimesMatrix", _F, "linear"),
    147: ("OuterProduct", _F, "linear"),
    148: ("Dot", _F, "dot"), 149: ("IAddCarry", _F, "extended"), 150: ("ISubBorrow", _F, "extended"),
    151: ("UMulExtended", _F, "extended"), 152: ("SMulExtended", _F, "extended"),
    # relational and logical
    154: ("Any", _U, "reduce"), 155: ("All", _U, "reduce"), 156: ("IsNan", _U, "ftest"), 157: ("IsInf", _U, "ftest"),
    158: ("IsFinite", _U, "ftest"), 159: ("IsNormal", _U, "ftest"), 160: ("SignBitSet", _U, "ftest"),
    162: ("Ordered", _F, "fcmp"), 163: ("Unordered", _F, "fcmp"), 164: ("LogicalEqual", _F, "logic"),
    165: ("LogicalNotEqual", _F, "logic"), 166: ("LogicalOr", _F, "logic"), 167: ("LogicalAnd", _F, "logic"),
    168: ("LogicalNot", _U, "logic"), 169: ("Select", "TRvvv", "select"),
    170: ("IEqual", _F, "icmp"), 171: ("INotEqual", _F, "icmp"), 172: ("UGreaterThan", _F, "icmp"),
    173: ("SGreaterThan", _F, "icmp"), 174: ("UGreaterThanEqual", _F, "icmp"), 175: ("SGreaterThanEqual", _F, "icmp"),
    176: ("ULessThan", _F, "icmp"), 177: ("SLessThan", _F, "icmp"), 178: ("ULessThanEqual", _F, "icmp"),
    179: ("SLessThanEqual", _F, "icmp"), 180: ("FOrdEqual", _F, "fcmp"), 181: ("FUnordEqual", _F, "fcmp"),
    182: ("FOrdNotEqual", _F, "fcmp"), 183: ("FUnordNotEqual", _F, "fcmp"), 184: ("FOrdLessThan", _F, "fcmp"),
    185: ("FUnordLessThan", _F, "fcmp"), 186: ("FOrdGreaterThan", _F, "fcmp"), 187: ("FUnordGreaterThan", _F, "fcmp"),
    188: ("FOrdLessThanEqual", _F, "fcmp"), 189: ("FUnordLessThanEqual", _F, "fcmp"),
    190: ("FOrdGreaterThanEqual", _F, "fcmp"), 191: ("FUnordGreaterThanEqual", _F, "fcmp"),
    # bits
    194: ("ShiftRightLogical", _F, "shift"), 195: ("ShiftRightArithmetic", _F, "shift"),
    196: ("ShiftLeftLogical", _F, "shift"), 197: ("BitwiseOr", _F, "int"), 198: ("BitwiseXor", _F, "int"),
    199: ("BitwiseAnd", _F, "int"), 200: ("Not", _U, "int"), 201: ("BitFieldInsert", "TRvvvv", "bits"),
    202: ("BitFieldSExtract", "TRvvv", "bits"), 203: ("BitFieldUExtract", "TRvvv", "bits"),
    204: ("BitReverse", _U, "int"),
    205: ("BitCount", _U, "bits"),
    # barriers and atomics
    224: ("ControlBarrier", "cce", ""), 225: ("MemoryBarrier", "ce", ""), 227: ("AtomicLoad", "TRvce", "atomic"),
    228: ("AtomicStore", "vcev", "atomicstore"), 229: ("AtomicExchange", _ATOMIC, "atomic"),
    230: ("AtomicCompareExchange", "TRvceevv", "atomic"), 231: ("AtomicCompareExchangeWeak", "TRvceevv", "atomic"),
    232: ("AtomicIIncrement", "TRvce", "atomic"), 233: ("AtomicIDecrement", "TRvce", "atomic"),
    234: ("AtomicIAdd", _ATOMIC, "atomic"), 235: ("AtomicISub", _ATOMIC, "atomic"),
    236: ("AtomicSMin", _ATOMIC, "atomic"), 237: ("AtomicUMin", _ATOMIC, "atomic"),
    238: ("AtomicSMax", _ATOMIC, "atomic"), 239: ("AtomicUMax", _ATOMIC, "atomic"),
    240: ("AtomicAnd", _ATOMIC, "atomic"), 241: ("AtomicOr", _ATOMIC, "atomic"), 242: ("AtomicXor", _ATOMIC, "atomic"),
    5614: ("AtomicFMinEXT", _ATOMIC, "atomic"), 5615: ("AtomicFMaxEXT", _ATOMIC, "atomic"),
    6035: ("AtomicFAddEXT", _ATOMIC, "atomic"),
    # control flow
    245: ("Phi", "TRP", "phi"), 246: ("LoopMerge", "llN", "loopmerge"), 247: ("SelectionMerge", "ln", "selectionmerge"),
    248: ("Label", "R", ""), 249: ("Branch", "l", ""), 250: ("BranchConditional", "vllN", "condition"),
    251: ("Switch", "vlW", "switch"),
    252: ("Kill", "", ""), 253: ("Return", "", "return"), 254: ("ReturnValue", "v", "return"),
    255: ("Unreachable", "", ""), 256: ("LifetimeStart", "vn", ""), 257: ("LifetimeStop", "vn", ""),
    4416: ("TerminateInvocation", "", ""),
    # work-group and subgroup operations
    261: ("GroupAll", "TRcv", "groupform"), 262: ("GroupAny", "TRcv", "groupform"),
    263: ("GroupBroadcast", "TRcvv", "group"),
    264: ("GroupIAdd", _GROUP, "group"), 265: ("GroupFAdd", _GROUP, "group"), 266: ("GroupFMin", _GROUP, "group"),
    267: ("GroupUMin", _GROUP, "group"), 268: ("GroupSMin", _GROUP, "group"), 269: ("GroupFMax", _GROUP, "group"),
    270: ("GroupUMax", _GROUP, "group"), 271: ("GroupSMax", _GROUP, "group"),
    333: ("GroupNonUniformElect", "TRc", "groupform"), 334: ("GroupNonUniformAll", "TRcv", "groupform"),
    335: ("GroupNonUniformAny", "TRcv", "groupform"), 336: ("GroupNonUniformAllEqual", "TRcv", "groupform"),
    337: ("GroupNonUniformBroadcast", "TRcvv", "group"), 338: ("GroupNonUniformBroadcastFirst", "TRcv", "group"),
    339: ("GroupNonUniformBallot", "TRcv", "groupform"), 340: ("GroupNonUniformInverseBallot", "TRcv", "groupform"),
    341: ("GroupNonUniformBallotBitExtract", "TRcvv", "groupform"),
    342: ("GroupNonUniformBallotBitCount", "TRcnv", "groupform"),
    343: ("GroupNonUniformBallotFindLSB", "TRcv", "groupform"),
    344: ("GroupNonUniformBallotFindMSB", "TRcv", "groupform"),
    345: ("GroupNonUniformShuffle", "TRcvv", "group"), 346: ("GroupNonUniformShuffleXor", "TRcvv", "group"),
    347: ("GroupNonUniformShuffleUp", "TRcvv", "group"), 348: ("GroupNonUniformShuffleDown", "TRcvv", "group"),
    365: ("GroupNonUniformQuadBroadcast", "TRcvv", "group"), 366: ("GroupNonUniformQuadSwap", "TRcvv", "group"),
}
for _op, _name in enumerate(("IAdd", "FAdd", "IMul", "FMul", "SMin", "UMin", "FMin", "SMax", "UMax", "FMax",
                             "BitwiseAnd", "BitwiseOr", "BitwiseXor", "LogicalAnd", "LogicalOr", "LogicalXor"), 349):
    OPS[_op] = ("GroupNonUniform" + _name, "TRcnvv?", "group")  # the last: a cluster size
