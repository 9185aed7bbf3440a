//! CUDA graphs from a stream capture, optionally with programmatic dependent launch (PDL).
//!
//! A captured graph's kernel-to-kernel edges are full dependencies: the next kernel is
//! launched only after the one before it has completed and its writes are flushed, and each
//! of the ~95 boundaries of a decode step costs launch latency with the GPU partly idle. With
//! `pdl`, [`end_capture`] turns every edge from a kernel node into a kernel node whose function
//! is PDL-safe ([`Gpu::is_pdl_function`]: it begins with `griddepcontrol.wait`, common.cuh's
//! `DUET_PDL_ENTRY`) into a programmatic edge: the dependent kernel may be launched once every
//! block of the one before it has started (and passed its own entry wait), and it waits at
//! its entry until that grid has completed and its writes are visible. The kernels compute
//! exactly what they computed before; only the launch overlaps.

use crate::runtime::Gpu;
use crate::GpuError;
use cudarc::driver::sys;
use std::sync::Arc;

fn ck(r: sys::CUresult, what: &str) -> Result<(), GpuError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(GpuError::Driver(format!("{what}: {r:?}")))
    }
}

/// An instantiated graph (destroyed on drop).
pub struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    gpu: Arc<Gpu>,
    /// kernel-to-kernel edges of the captured graph
    pub kernel_edges: usize,
    /// of those, made programmatic
    pub programmatic_edges: usize,
}

impl Graph {
    /// Launches the graph on the GPU's stream.
    pub fn launch(&self) -> Result<(), GpuError> {
        self.gpu
            .ctx
            .bind_to_thread()
            .map_err(|e| GpuError::Driver(format!("graph launch: {e}")))?;
        // SAFETY: `exec` is a live instantiated graph; the stream is the GPU's.
        ck(
            unsafe { sys::cuGraphLaunch(self.exec, self.gpu.stream.cu_stream()) },
            "cuGraphLaunch",
        )
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        let _ = self.gpu.ctx.bind_to_thread();
        // SAFETY: both handles are owned by this value and destroyed once.
        unsafe {
            if !self.exec.is_null() {
                let _ = sys::cuGraphExecDestroy(self.exec);
            }
            if !self.graph.is_null() {
                let _ = sys::cuGraphDestroy(self.graph);
            }
        }
    }
}

/// Ends the capture on the GPU's stream and instantiates the graph; with `pdl`, edges between
/// kernels (into a PDL-safe kernel) become programmatic first.
pub fn end_capture(gpu: &Arc<Gpu>, pdl: bool) -> Result<Graph, GpuError> {
    gpu.ctx
        .bind_to_thread()
        .map_err(|e| GpuError::Driver(format!("graph capture: {e}")))?;
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: ends the capture begun on this stream; `graph` receives the captured graph.
    ck(
        unsafe { sys::cuStreamEndCapture(gpu.stream.cu_stream(), &mut graph) },
        "cuStreamEndCapture",
    )?;
    if graph.is_null() {
        return Err(GpuError::Driver(
            "graph capture: the capture recorded nothing".into(),
        ));
    }
    let mut g = Graph {
        graph,
        exec: std::ptr::null_mut(),
        gpu: gpu.clone(),
        kernel_edges: 0,
        programmatic_edges: 0,
    };
    // SAFETY: `g.graph` is the live captured graph, owned by `g`.
    unsafe { rewrite_edges(&mut g, pdl)? };
    let mut exec: sys::CUgraphExec = std::ptr::null_mut();
    // SAFETY: instantiates the live graph; `exec` is owned by `g` from here.
    ck(
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, g.graph, 0) },
        "cuGraphInstantiateWithFlags",
    )?;
    g.exec = exec;
    Ok(g)
}

/// Counts the kernel-to-kernel edges and, with `pdl`, makes those into a PDL-safe kernel
/// programmatic.
///
/// # Safety
/// `g.graph` must be a live graph not being instantiated or launched elsewhere.
unsafe fn rewrite_edges(g: &mut Graph, pdl: bool) -> Result<(), GpuError> {
    let mut n = 0usize;
    ck(
        sys::cuGraphGetEdges_v2(
            g.graph,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut n,
        ),
        "cuGraphGetEdges (count)",
    )?;
    let mut from: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); n];
    let mut to: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); n];
    let mut data: Vec<sys::CUgraphEdgeData> = vec![std::mem::zeroed(); n];
    ck(
        sys::cuGraphGetEdges_v2(
            g.graph,
            from.as_mut_ptr(),
            to.as_mut_ptr(),
            data.as_mut_ptr(),
            &mut n,
        ),
        "cuGraphGetEdges",
    )?;
    let is_kernel = |node: sys::CUgraphNode| -> Result<bool, GpuError> {
        let mut t = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        ck(sys::cuGraphNodeGetType(node, &mut t), "cuGraphNodeGetType")?;
        Ok(t == sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL)
    };
    for i in 0..n.min(from.len()) {
        if data[i].type_ != sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_DEFAULT as u8
            || !is_kernel(from[i])?
            || !is_kernel(to[i])?
        {
            continue;
        }
        g.kernel_edges += 1;
        if !pdl {
            continue;
        }
        let mut p: sys::CUDA_KERNEL_NODE_PARAMS = std::mem::zeroed();
        ck(
            sys::cuGraphKernelNodeGetParams_v2(to[i], &mut p),
            "cuGraphKernelNodeGetParams",
        )?;
        if p.func.is_null() || !g.gpu.is_pdl_function(p.func) {
            continue;
        }
        ck(
            sys::cuGraphRemoveDependencies_v2(g.graph, &from[i], &to[i], &data[i], 1),
            "cuGraphRemoveDependencies",
        )?;
        let e = sys::CUgraphEdgeData {
            from_port: sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC as u8,
            to_port: 0,
            type_: sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8,
            reserved: [0; 5],
        };
        ck(
            sys::cuGraphAddDependencies_v2(g.graph, &from[i], &to[i], &e, 1),
            "cuGraphAddDependencies (programmatic)",
        )?;
        g.programmatic_edges += 1;
    }
    Ok(())
}
