// RUN: ampc-opt %s --graph-inline-calls | FileCheck %s
// Verifying a model whose call graph has many functions: the recursion check must not
// invalidate its own call lists while it walks them (the call map used to grow mid-walk).
// CHECK-LABEL: graph.model @many_calls
// CHECK-NOT: func.call
// CHECK: graph.loss
graph.model @many_calls {
  func.func private @leaf0(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf1(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf2(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf3(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf4(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf5(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf6(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf7(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf8(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf9(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf10(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf11(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf12(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf13(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf14(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf15(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf16(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf17(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf18(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf19(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf20(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf21(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf22(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf23(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf24(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf25(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf26(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf27(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf28(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf29(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf30(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf31(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf32(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf33(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf34(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf35(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf36(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf37(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf38(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf39(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf40(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf41(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf42(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf43(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf44(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf45(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf46(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf47(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf48(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf49(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf50(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf51(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf52(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf53(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf54(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf55(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf56(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf57(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf58(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @leaf59(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = graph.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
  func.func private @fan(%x0: tensor<2xf32>) -> tensor<2xf32> {
    %x1 = func.call @leaf0(%x0) : (tensor<2xf32>) -> tensor<2xf32>
    %x2 = func.call @leaf1(%x1) : (tensor<2xf32>) -> tensor<2xf32>
    %x3 = func.call @leaf2(%x2) : (tensor<2xf32>) -> tensor<2xf32>
    %x4 = func.call @leaf3(%x3) : (tensor<2xf32>) -> tensor<2xf32>
    %x5 = func.call @leaf4(%x4) : (tensor<2xf32>) -> tensor<2xf32>
    %x6 = func.call @leaf5(%x5) : (tensor<2xf32>) -> tensor<2xf32>
    %x7 = func.call @leaf6(%x6) : (tensor<2xf32>) -> tensor<2xf32>
    %x8 = func.call @leaf7(%x7) : (tensor<2xf32>) -> tensor<2xf32>
    %x9 = func.call @leaf8(%x8) : (tensor<2xf32>) -> tensor<2xf32>
    %x10 = func.call @leaf9(%x9) : (tensor<2xf32>) -> tensor<2xf32>
    %x11 = func.call @leaf10(%x10) : (tensor<2xf32>) -> tensor<2xf32>
    %x12 = func.call @leaf11(%x11) : (tensor<2xf32>) -> tensor<2xf32>
    %x13 = func.call @leaf12(%x12) : (tensor<2xf32>) -> tensor<2xf32>
    %x14 = func.call @leaf13(%x13) : (tensor<2xf32>) -> tensor<2xf32>
    %x15 = func.call @leaf14(%x14) : (tensor<2xf32>) -> tensor<2xf32>
    %x16 = func.call @leaf15(%x15) : (tensor<2xf32>) -> tensor<2xf32>
    %x17 = func.call @leaf16(%x16) : (tensor<2xf32>) -> tensor<2xf32>
    %x18 = func.call @leaf17(%x17) : (tensor<2xf32>) -> tensor<2xf32>
    %x19 = func.call @leaf18(%x18) : (tensor<2xf32>) -> tensor<2xf32>
    %x20 = func.call @leaf19(%x19) : (tensor<2xf32>) -> tensor<2xf32>
    %x21 = func.call @leaf20(%x20) : (tensor<2xf32>) -> tensor<2xf32>
    %x22 = func.call @leaf21(%x21) : (tensor<2xf32>) -> tensor<2xf32>
    %x23 = func.call @leaf22(%x22) : (tensor<2xf32>) -> tensor<2xf32>
    %x24 = func.call @leaf23(%x23) : (tensor<2xf32>) -> tensor<2xf32>
    %x25 = func.call @leaf24(%x24) : (tensor<2xf32>) -> tensor<2xf32>
    %x26 = func.call @leaf25(%x25) : (tensor<2xf32>) -> tensor<2xf32>
    %x27 = func.call @leaf26(%x26) : (tensor<2xf32>) -> tensor<2xf32>
    %x28 = func.call @leaf27(%x27) : (tensor<2xf32>) -> tensor<2xf32>
    %x29 = func.call @leaf28(%x28) : (tensor<2xf32>) -> tensor<2xf32>
    %x30 = func.call @leaf29(%x29) : (tensor<2xf32>) -> tensor<2xf32>
    %x31 = func.call @leaf30(%x30) : (tensor<2xf32>) -> tensor<2xf32>
    %x32 = func.call @leaf31(%x31) : (tensor<2xf32>) -> tensor<2xf32>
    %x33 = func.call @leaf32(%x32) : (tensor<2xf32>) -> tensor<2xf32>
    %x34 = func.call @leaf33(%x33) : (tensor<2xf32>) -> tensor<2xf32>
    %x35 = func.call @leaf34(%x34) : (tensor<2xf32>) -> tensor<2xf32>
    %x36 = func.call @leaf35(%x35) : (tensor<2xf32>) -> tensor<2xf32>
    %x37 = func.call @leaf36(%x36) : (tensor<2xf32>) -> tensor<2xf32>
    %x38 = func.call @leaf37(%x37) : (tensor<2xf32>) -> tensor<2xf32>
    %x39 = func.call @leaf38(%x38) : (tensor<2xf32>) -> tensor<2xf32>
    %x40 = func.call @leaf39(%x39) : (tensor<2xf32>) -> tensor<2xf32>
    %x41 = func.call @leaf40(%x40) : (tensor<2xf32>) -> tensor<2xf32>
    %x42 = func.call @leaf41(%x41) : (tensor<2xf32>) -> tensor<2xf32>
    %x43 = func.call @leaf42(%x42) : (tensor<2xf32>) -> tensor<2xf32>
    %x44 = func.call @leaf43(%x43) : (tensor<2xf32>) -> tensor<2xf32>
    %x45 = func.call @leaf44(%x44) : (tensor<2xf32>) -> tensor<2xf32>
    %x46 = func.call @leaf45(%x45) : (tensor<2xf32>) -> tensor<2xf32>
    %x47 = func.call @leaf46(%x46) : (tensor<2xf32>) -> tensor<2xf32>
    %x48 = func.call @leaf47(%x47) : (tensor<2xf32>) -> tensor<2xf32>
    %x49 = func.call @leaf48(%x48) : (tensor<2xf32>) -> tensor<2xf32>
    %x50 = func.call @leaf49(%x49) : (tensor<2xf32>) -> tensor<2xf32>
    %x51 = func.call @leaf50(%x50) : (tensor<2xf32>) -> tensor<2xf32>
    %x52 = func.call @leaf51(%x51) : (tensor<2xf32>) -> tensor<2xf32>
    %x53 = func.call @leaf52(%x52) : (tensor<2xf32>) -> tensor<2xf32>
    %x54 = func.call @leaf53(%x53) : (tensor<2xf32>) -> tensor<2xf32>
    %x55 = func.call @leaf54(%x54) : (tensor<2xf32>) -> tensor<2xf32>
    %x56 = func.call @leaf55(%x55) : (tensor<2xf32>) -> tensor<2xf32>
    %x57 = func.call @leaf56(%x56) : (tensor<2xf32>) -> tensor<2xf32>
    %x58 = func.call @leaf57(%x57) : (tensor<2xf32>) -> tensor<2xf32>
    %x59 = func.call @leaf58(%x58) : (tensor<2xf32>) -> tensor<2xf32>
    %x60 = func.call @leaf59(%x59) : (tensor<2xf32>) -> tensor<2xf32>
    return %x60 : tensor<2xf32>
  }
  func.func @forward() {
    %c = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
    %a = func.call @fan(%c) : (tensor<2xf32>) -> tensor<2xf32>
    %b = func.call @fan(%a) : (tensor<2xf32>) -> tensor<2xf32>
    %l = graph.sum %b axes [0] : tensor<2xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
