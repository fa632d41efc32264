"""Hardware catalog: GPUs, NICs, scale-out switches and NVLink switches as frozen specs.

Every number is SI (bytes, bytes/s, FLOP/s, s) and cites its public source; the sources are
collected, with caveats, in shared/research/hardware-and-recipes.md ("the research doc").
Peaks are dense (no 2:4 sparsity). Bandwidths are per direction: a link of B bytes/s moves
B bytes/s each way at once. Registries are plain dicts looked up by exact key.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, TypeVar

PRECISION_KEYS = ("bf16", "fp8", "nvfp4")
# GPU generations whose kernels behave alike (the cost model keys efficiencies by them).
ARCHITECTURES = ("hopper", "blackwell", "blackwell-ultra")
# Generations with block-scaled tensor cores (MXFP8, NVFP4); Hopper scales FP8 per tensor.
BLOCK_SCALED_ARCHITECTURES = ("blackwell", "blackwell-ultra")
"""Peak keys: fp8 also serves MXFP8 and FP8 blockwise (same tensor-core peak); nvfp4 is optional."""
# The CPU that launches a GPU's kernels: an x86 server CPU (DGX/HGX nodes) or the Grace CPU
# of a Grace-Blackwell superchip (GB200/GB300).
HOST_CPUS = ("x86", "grace")

SWITCH_PROTOCOLS = ("infiniband", "ethernet")

GB = 1e9  # decimal gigabyte, as datasheets use it
TB = 1e12
MIB = 2**20  # binary mebibyte, as nvidia-smi reports memory
TFLOPS = 1e12
PFLOPS = 1e15
GBIT = 1e9 / 8  # one gigabit in bytes


def _require_positive(owner: str, name: str, value: float) -> None:
    """Raise unless value is a finite number > 0 (bool is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
        math.isfinite(value) and value > 0
    ):
        raise ValueError(f"{owner}: {name} must be a positive number, got {value!r}")


def _require_count(owner: str, name: str, value: int) -> None:
    """Raise unless value is an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")


def _require_name(kind: str, name: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind}: name must be a non-empty string, got {name!r}")


def _require_non_negative(owner: str, name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
        math.isfinite(value) and value >= 0
    ):
        raise ValueError(f"{owner}: {name} must be a number >= 0, got {value!r}")


def _require_bool(owner: str, name: str, value: bool) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{owner}: {name} must be true or false, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class GPUSpec:
    """One GPU: SMs, dense tensor peaks per precision, the special-function units' rate of
    exponentials (the softmax of attention), usable HBM, NVLink per direction."""

    name: str
    architecture: str
    sm_count: int
    peak_flops_per_s: Mapping[str, float]
    exp_per_s: float
    hbm_capacity_bytes: float
    hbm_bandwidth_bytes_per_s: float
    nvlink_generation: int
    nvlink_links: int
    nvlink_bandwidth_bytes_per_s: float
    host_cpu: str = "x86"

    def __post_init__(self) -> None:
        _require_name("GPUSpec", self.name)
        owner = f"gpu '{self.name}'"
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"{owner}: architecture={self.architecture!r}, must be one of "
                             f"{', '.join(ARCHITECTURES)}")
        if self.host_cpu not in HOST_CPUS:
            raise ValueError(f"{owner}: host_cpu={self.host_cpu!r}, must be one of "
                             f"{', '.join(HOST_CPUS)}")
        _require_count(owner, "sm_count", self.sm_count)
        _check_peaks(owner, self.peak_flops_per_s)
        _require_positive(owner, "exp_per_s", self.exp_per_s)
        # A read-only copy: the catalog cannot be changed through a spec; use dataclasses.replace.
        object.__setattr__(self, "peak_flops_per_s", MappingProxyType(dict(self.peak_flops_per_s)))
        _require_positive(owner, "hbm_capacity_bytes", self.hbm_capacity_bytes)
        _require_positive(owner, "hbm_bandwidth_bytes_per_s", self.hbm_bandwidth_bytes_per_s)
        _require_count(owner, "nvlink_generation", self.nvlink_generation)
        _require_count(owner, "nvlink_links", self.nvlink_links)
        _require_positive(owner, "nvlink_bandwidth_bytes_per_s", self.nvlink_bandwidth_bytes_per_s)

    @property
    def block_scaled(self) -> bool:
        """Whether the tensor cores run block-scaled formats (MXFP8, NVFP4)."""
        return self.architecture in BLOCK_SCALED_ARCHITECTURES

    def peak(self, precision_key: str) -> float:
        """Dense tensor-core peak in FLOP/s for "bf16", "fp8" or "nvfp4"."""
        if precision_key not in self.peak_flops_per_s:
            known = ", ".join(self.peak_flops_per_s)
            raise ValueError(
                f"gpu '{self.name}' has no peak for precision {precision_key!r}: known are {known}"
            )
        return self.peak_flops_per_s[precision_key]

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted(self.peak_flops_per_s.items())), self.sm_count))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle through the constructor (a mappingproxy itself does not pickle)."""
        kwargs = {f.name: getattr(self, f.name) for f in fields(self)}
        kwargs["peak_flops_per_s"] = dict(self.peak_flops_per_s)
        return (functools.partial(GPUSpec, **kwargs), ())


def _check_peaks(owner: str, peaks: Mapping[str, float]) -> None:
    if not isinstance(peaks, Mapping):
        raise ValueError(f"{owner}: peak_flops_per_s must be a mapping, got {peaks!r}")
    unknown = [key for key in peaks if key not in PRECISION_KEYS]
    if unknown or "bf16" not in peaks or "fp8" not in peaks:
        raise ValueError(
            f"{owner}: peak_flops_per_s keys {sorted(peaks)} invalid: "
            f"bf16 and fp8 are required, nvfp4 optional, nothing else"
        )
    for key, value in peaks.items():
        _require_positive(owner, f"peak_flops_per_s[{key!r}]", value)


@dataclass(frozen=True, slots=True, kw_only=True)
class NICSpec:
    """A scale-out NIC: line rate per direction and the latency of one traversal."""

    name: str
    bandwidth_bytes_per_s: float
    latency_s: float

    def __post_init__(self) -> None:
        _require_name("NICSpec", self.name)
        _require_positive(f"nic '{self.name}'", "bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        _require_non_negative(f"nic '{self.name}'", "latency_s", self.latency_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class SwitchSpec:
    """A scale-out (InfiniBand or Ethernet) switch ASIC: radix, port speed, hop latency.

    adaptive_routing: the ASIC can pick, per packet, the least-loaded of the equal-cost output
    ports (a fabric may still run static ECMP hashing: SystemSpec.routing).
    """

    name: str
    protocol: str
    radix: int
    port_bandwidth_bytes_per_s: float
    hop_latency_s: float
    in_network_reduction: bool
    adaptive_routing: bool

    def __post_init__(self) -> None:
        _require_name("SwitchSpec", self.name)
        owner = f"switch '{self.name}'"
        if self.protocol not in SWITCH_PROTOCOLS:
            raise ValueError(
                f"{owner}: unknown protocol {self.protocol!r}: known are "
                + ", ".join(SWITCH_PROTOCOLS)
            )
        _require_count(owner, "radix", self.radix)
        if self.radix < 2 or self.radix % 2:
            raise ValueError(f"{owner}: radix must be an even int >= 2, got {self.radix!r}")
        _require_positive(owner, "port_bandwidth_bytes_per_s", self.port_bandwidth_bytes_per_s)
        _require_non_negative(owner, "hop_latency_s", self.hop_latency_s)
        _require_bool(owner, "in_network_reduction", self.in_network_reduction)
        _require_bool(owner, "adaptive_routing", self.adaptive_routing)


@dataclass(frozen=True, slots=True, kw_only=True)
class NVLinkSwitchSpec:
    """NVLink switch chips of one NVLink domain: ports per chip, chips per tray, trays."""

    name: str
    ports: int
    port_bandwidth_bytes_per_s: float
    chips_per_tray: int
    trays_per_rack: int
    hop_latency_s: float
    in_switch_reduction: bool

    def __post_init__(self) -> None:
        _require_name("NVLinkSwitchSpec", self.name)
        owner = f"nvlink switch '{self.name}'"
        _require_count(owner, "ports", self.ports)
        _require_positive(owner, "port_bandwidth_bytes_per_s", self.port_bandwidth_bytes_per_s)
        _require_count(owner, "chips_per_tray", self.chips_per_tray)
        _require_count(owner, "trays_per_rack", self.trays_per_rack)
        _require_non_negative(owner, "hop_latency_s", self.hop_latency_s)
        _require_bool(owner, "in_switch_reduction", self.in_switch_reduction)

    @property
    def chips(self) -> int:
        """Switch chips in one domain."""
        return self.chips_per_tray * self.trays_per_rack


def _hopper(name: str, hbm_bytes: float, hbm_bytes_per_s: float, links: int) -> GPUSpec:
    """H100/H800/H200 share GH100 SXM5: 132 SMs, 989.4 TF BF16, 1,978.9 TF FP8 dense.

    Sources: glennklockwood.com/garden/processors/h100 (132 SMs; dense TFLOPs table from the
    NVIDIA H100 datasheet); the H200 and H800 are the same die (research doc, table 1.1).
    NVLink4 runs 25 GB/s per direction per link (18 links = 450 GB/s per direction).
    Exponentials: "the H100 SXM5 GPU has 989 TFLOPS of FP16 matmul but only 3.9 TFLOPS of
    special functions" (FlashAttention-3, Shah et al., arXiv 2407.08608).
    """
    return GPUSpec(
        name=name,
        architecture="hopper",
        sm_count=132,
        peak_flops_per_s={"bf16": 989.4 * TFLOPS, "fp8": 1978.9 * TFLOPS},
        exp_per_s=3.9e12,
        hbm_capacity_bytes=hbm_bytes,
        hbm_bandwidth_bytes_per_s=hbm_bytes_per_s,
        nvlink_generation=4,
        nvlink_links=links,
        nvlink_bandwidth_bytes_per_s=links * 25 * GB,
    )


BLACKWELL_EXP_PER_S = {"blackwell": 5e12, "blackwell-ultra": 10.7e12}


def _blackwell(
    name: str, sms: int, peaks_pflops: tuple[float, float, float], hbm_gb: float,
    architecture: str = "blackwell", host_cpu: str = "x86",
) -> GPUSpec:
    """Blackwell / Blackwell Ultra: NVLink5, 18 links x 50 GB/s per direction = 900 GB/s.

    Sources: research doc table 1.1 (NVIDIA Blackwell datasheet via glennklockwood B200/B300
    pages; NVL72 rack totals / 72; verda.com GB300 blog); SM counts from NVIDIA's "Inside
    Blackwell Ultra" blog (B300 160 SMs, B200 148). HBM bandwidth 8 TB/s (datasheets say
    7.7-8 TB/s for B200/B300; 8 TB/s = 576 TB/s per NVL72 rack / 72). Exponentials (SFU
    MUFU.EX2): 5 TeraExponentials/s on Blackwell, 10.7 on Blackwell Ultra, which doubles the
    SFU's throughput for the softmax (verda.com GB300 blog table; NVIDIA's "Making Softmax
    More Efficient with NVIDIA Blackwell Ultra" blog, which measured DeepSeek-V3's FP8
    attention forward about 35 % faster on GB300 than on GB200).
    """
    bf16, fp8, nvfp4 = peaks_pflops
    return GPUSpec(
        name=name,
        architecture=architecture,
        sm_count=sms,
        peak_flops_per_s={"bf16": bf16 * PFLOPS, "fp8": fp8 * PFLOPS, "nvfp4": nvfp4 * PFLOPS},
        exp_per_s=BLACKWELL_EXP_PER_S[architecture],
        hbm_capacity_bytes=hbm_gb * GB,
        hbm_bandwidth_bytes_per_s=8 * TB,
        nvlink_generation=5,
        nvlink_links=18,
        nvlink_bandwidth_bytes_per_s=900 * GB,
        host_cpu=host_cpu,
    )


GPUS: dict[str, GPUSpec] = {
    # GB200 in NVL72 (1,200 W): 2.5/5/10 PF dense = NVIDIA GB200 NVL72 rack spec (360/720/1,440 PF
    # sparse) / 72 / 2; 186 GB usable of 192 (MLPerf Inference v6.1 Crusoe GB200 system JSON).
    # GB200 and GB300 superchips pair their GPUs with a Grace CPU (NVIDIA GB200/GB300 NVL72
    # product pages: 36 Grace CPUs, 72 GPUs per rack).
    "gb200": _blackwell("gb200", 148, (2.5, 5.0, 10.0), 186, host_cpu="grace"),
    # GB300 in NVL72 (1,400 W): 2.5/5/15 PF dense (verda.com GB300 blog rack totals 180 PF BF16,
    # 360 PF FP8; NVIDIA MLPerf v5.1 blog 15 PF NVFP4); 279 GB usable of 288 (same blog).
    "gb300": _blackwell("gb300", 160, (2.5, 5.0, 15.0), 279, "blackwell-ultra", "grace"),
    # H100 SXM5: "80 GB" HBM3, 3.35 TB/s, 18 NVLink4 links (NVIDIA H100 datasheet via
    # glennklockwood). Usable: nvidia-smi reports 81,559 MiB total on an "H100 80GB HBM3"
    # (public nvidia-smi logs), i.e. 80 GiB less the driver's reservation.
    "h100": _hopper("h100", 81559 * MIB, 3.35 * TB, 18),
    # H800 SXM5: H100 with NVLink cut to 400 GB/s bidirectional = 8 links x 25 GB/s per direction
    # (NVIDIA H800 datasheet via philisun.com H800-vs-H100; DeepSeek-V3 report section 3.2).
    # Same 81,559 MiB of HBM3 as the H100 (same board).
    "h800": _hopper("h800", 81559 * MIB, 3.35 * TB, 8),
    # H200 SXM: 141 GB HBM3e, 4.8 TB/s, 18 NVLink4 links (NVIDIA H200 page via datacrunch.io;
    # MLPerf Inference v4.1 NVIDIA system JSON); nvidia-smi reports 143,771 MiB usable (public
    # nvidia-smi logs).
    "h200": _hopper("h200", 143771 * MIB, 4.8 * TB, 18),
    # B200 HGX/DGX (1,000 W): 2.25/4.5/9 PF dense, 180 GB usable of 192 (NVIDIA Blackwell
    # datasheet via glennklockwood.com/garden/processors/B200; TorchTitan peak 2.25e15).
    "b200": _blackwell("b200", 148, (2.25, 4.5, 9.0), 180),
    # B300 HGX: 2.25/4.5 PF dense BF16/FP8; dense FP4 is quoted at 13.1-15 PF depending on board
    # power; we take 14 PF (glennklockwood.com/garden/processors/B300). ~270 GB usable of 288.
    "b300": _blackwell("b300", 160, (2.25, 4.5, 14.0), 270, "blackwell-ultra"),
}

NICS: dict[str, NICSpec] = {
    # latency_s: DeepSeek (arXiv 2505.09343, ISCA'25) measured 64 B over IB at ~2.8 us same-leaf
    # and ~3.7 us cross-leaf, end to end incl. software; minus one ~0.3 us switch hop and split
    # over the sending and receiving NIC gives ~1.25 us per NIC. Not re-verified; a parameter.
    # ConnectX-7: 1 x 400 Gb/s NDR = 50 GB/s per direction (DeepEP README; SuperPOD RAs).
    "connectx-7": NICSpec(name="connectx-7", bandwidth_bytes_per_s=400 * GBIT, latency_s=1.25e-6),
    # ConnectX-8 SuperNIC: 800 Gb/s = 100 GB/s per direction (NVIDIA Quantum-X800 material via
    # ziash study guide, quantum-computing.news). No separate latency source: same as CX-7.
    "connectx-8": NICSpec(name="connectx-8", bandwidth_bytes_per_s=800 * GBIT, latency_s=1.25e-6),
}

# Switch hop latency: sources are unverified and conflict (Quantum-2 port-to-port "<150 ns" on
# router-switch.com, "~330 ns" on yobitel.com); we use 300 ns for every scale-out switch.
SWITCH_HOP_LATENCY_S = 300e-9

# Adaptive routing (AR): NVIDIA InfiniBand switches select the output port by its load, and the
# subnet manager turns AR on by default ("AR is enabled by default in the opensm.conf file",
# routing_engine ar_updn; docs.nvidia.com/networking/display/ibclusterbringupprocedure/
# adaptive+routing). Spectrum-X (Spectrum-4 + BlueField-3 / ConnectX-8 SuperNIC) routes RoCE
# per packet to the least-loaded port and the SuperNIC reorders (NVIDIA Spectrum-X material, via
# firstpasslab.com "How NVIDIA Spectrum-X ports InfiniBand tricks to Ethernet").
SWITCHES: dict[str, SwitchSpec] = {
    # Quantum-2 QM9700/9790 NDR: 64 x 400 Gb/s, 51.2 Tb/s, SHARPv3 (itctshop / yobitel pages);
    # adaptive routing (NVIDIA InfiniBand cluster bring-up, above).
    "quantum-2": SwitchSpec(
        name="quantum-2", protocol="infiniband", radix=64, port_bandwidth_bytes_per_s=400 * GBIT,
        hop_latency_s=SWITCH_HOP_LATENCY_S, in_network_reduction=True, adaptive_routing=True,
    ),
    # Quantum-X800 Q3400 XDR: 144 x 800 Gb/s, 115.2 Tb/s, SHARPv4, "adaptive routing, congestion
    # control" (ziash NCA-AIIO study guide 2.9; quantum-computing.news).
    "quantum-x800": SwitchSpec(
        name="quantum-x800", protocol="infiniband", radix=144,
        port_bandwidth_bytes_per_s=800 * GBIT, hop_latency_s=SWITCH_HOP_LATENCY_S,
        in_network_reduction=True, adaptive_routing=True,
    ),
    # Spectrum-X (Spectrum-4 SN5600): 64 x 800GbE, 51.2 Tb/s, RoCE, no in-network reduction
    # (router-switch.com Quantum-2 vs Spectrum-4); per-packet RoCE adaptive routing (above).
    "spectrum-x": SwitchSpec(
        name="spectrum-x", protocol="ethernet", radix=64, port_bandwidth_bytes_per_s=800 * GBIT,
        hop_latency_s=SWITCH_HOP_LATENCY_S, in_network_reduction=False, adaptive_routing=True,
    ),
}

# NVLink hop latency: no clean public figure. DeepSeek measured ~3.3 us end to end for a small
# NVLink message including software (arXiv 2505.09343); we charge 1 us per switch hop. A parameter.
NVLINK_HOP_LATENCY_S = 1e-6

NVLINK_SWITCHES: dict[str, NVLinkSwitchSpec] = {
    # NVL72 (GB200/GB300): 9 NVLink Switch trays x 2 ASICs, 72 NVLink5 ports each at 100 GB/s
    # bidirectional (50 per direction); NVLink SHARP (NVLS) in switch. docs.nvidia.com BCM
    # "NVLink Switch Integration"; port counts from secondary sources (research doc table 1.2).
    "nvlink5-switch": NVLinkSwitchSpec(
        name="nvlink5-switch", ports=72, port_bandwidth_bytes_per_s=50 * GB, chips_per_tray=2,
        trays_per_rack=9, hop_latency_s=NVLINK_HOP_LATENCY_S, in_switch_reduction=True,
    ),
    # HGX/DGX B200 baseboard: 2 NVLink5 switch chips (down from 4 on H100), 8 GPUs x 18 links =
    # 144 = 2 x 72 ports (servethehome "NVLink Switch chips change to the HGX B200", Computex 2024).
    "nvlink5-hgx": NVLinkSwitchSpec(
        name="nvlink5-hgx", ports=72, port_bandwidth_bytes_per_s=50 * GB, chips_per_tray=2,
        trays_per_rack=1, hop_latency_s=NVLINK_HOP_LATENCY_S, in_switch_reduction=True,
    ),
    # HGX/DGX H100/H200: 4 x third-generation NVSwitch per baseboard, 64 NVLink4 ports each at
    # 25 GB/s per direction, NVLink SHARP (research doc table 1.2; NVIDIA Hopper architecture page).
    "nvswitch3": NVLinkSwitchSpec(
        name="nvswitch3", ports=64, port_bandwidth_bytes_per_s=25 * GB, chips_per_tray=4,
        trays_per_rack=1, hop_latency_s=NVLINK_HOP_LATENCY_S, in_switch_reduction=True,
    ),
}

SpecT = TypeVar("SpecT")


def _lookup(kind: str, catalog: Mapping[str, SpecT], name: str) -> SpecT:
    if name not in catalog:
        raise ValueError(f"unknown {kind} {name!r}: known are {', '.join(catalog)}")
    return catalog[name]


def gpu_spec(name: str) -> GPUSpec:
    """The catalog GPU with exactly this key."""
    return _lookup("gpu", GPUS, name)


def nic_spec(name: str) -> NICSpec:
    """The catalog NIC with exactly this key."""
    return _lookup("nic", NICS, name)


def switch_spec(name: str) -> SwitchSpec:
    """The catalog scale-out switch with exactly this key."""
    return _lookup("switch", SWITCHES, name)


def nvlink_switch_spec(name: str) -> NVLinkSwitchSpec:
    """The catalog NVLink switch with exactly this key."""
    return _lookup("nvlink switch", NVLINK_SWITCHES, name)
